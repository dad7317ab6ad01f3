"""The bake-off pages' HTML: embedded JSON holds no markup (any user text), links never come from request headers."""

from __future__ import annotations

import json
import re

import pytest

from zsnli.compare.service.page import json_script, result_page

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


MAJORITY_ONLY = {"task_description": "support", "candidates": ["majority"],
                 "examples": [{"input": "Cannot sign in", "expected": "access"},
                              {"input": "Refund my invoice", "expected": "billing"}]}


@pytest.fixture
def bakeoff_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))


@pytest.mark.anyio
@pytest.mark.parametrize("public, base", [(None, ""), ("https://zsnli.example.com/x", "https://zsnli.example.com/x/")])
async def test_links_come_from_zsnli_public_url_never_from_host(bert_dir, bakeoff_env, public, base):
    from bakeoff_support import make_bakeoff_app
    from conftest import running_app

    app = make_bakeoff_app(bert_dir, public_url=public)
    forged = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "Forwarded": "host=evil.example"}
    async with running_app(app) as client:
        answer = (await client.post("/v1/bakeoff", json=MAJORITY_ONLY, headers=forged)).json()
        pages = [await client.get(path, headers=forged) for path in (f"/bakeoffs/{answer['id']}", "/bakeoff")]
    for page in pages:
        assert page.status_code == 200
        assert "evil.example" not in page.text
        assert re.search(r"<section id=.result.[^>]*data-base=.(.*?).>", page.text).group(1) == base
    assert "evil.example" not in json.dumps(answer)


@pytest.mark.parametrize("raw", ["evil.example", "ftp://x.example/", "https://", "https://x.example/?a=1",
                                 "https://x.example/#f", "https://user@x.example/", "https://x.example:99999/",
                                 "https://x.example/<script>"])
def test_bad_public_url_is_one_line_naming_the_setting(raw):
    from zsnli.config import Settings, SettingsError

    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_PUBLIC_URL": raw})
    assert str(err.value).startswith("ZSNLI_PUBLIC_URL must be") and "\n" not in str(err.value)


def test_public_url_is_normalised_with_a_trailing_slash():
    from zsnli.config import Settings

    assert Settings.from_env({"ZSNLI_PUBLIC_URL": " https://zsnli.example.com "}).public_url == "https://zsnli.example.com/"
    assert Settings.from_env({}).public_url is None and Settings.from_env({"ZSNLI_PUBLIC_URL": ""}).public_url is None
