"""The bake-off pages' HTML: embedded JSON holds no markup (any user text), links never come from request headers."""

from __future__ import annotations

import json
import re

import pytest

from zsnli.bakeoff.page import json_script, result_page

NASTY = ["<!--<script>", "</script>", "</SCRIPT >", "<script>alert(1)</script>", "a & b", "x > y", "\u2028", "\u2029",
         "<![CDATA[", "-->", "\"'`", "\ufffd", "\x00", "東京 😀"]


@pytest.mark.parametrize("text", NASTY)
def test_json_script_holds_no_markup_and_round_trips(text):
    value = {"task_description": text, "labels": {text: text}, "scorecard": [{"error": text}], text: [text]}
    block = json_script(value, "bakeoff-data")
    m = re.fullmatch(r"<script type='application/json' id='bakeoff-data'>(.*)</script>", block, re.S)
    assert m, block
    inner = m.group(1)
    for ch in "<>&\u2028\u2029":
        assert ch not in inner
    assert json.loads(inner) == value


def test_result_page_embeds_the_answer_escaped():
    answer = {"id": "bo_" + "a" * 32, "task_description": "<!--<script>", "winner": "served", "labels": {}}
    page = result_page(answer, "")
    assert page.count("<script") == 2  # bakeoff.js and the data block; nothing from the answer
    assert "<!--<script>" not in page and "&lt;!--&lt;script&gt;" in page
