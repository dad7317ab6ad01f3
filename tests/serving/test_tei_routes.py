"""What a text-embeddings-inference (TEI) client expects of zsnli's TEI routes (issue 40, item 10).

* ``POST /tokenize`` answers TEI's ``SimpleToken`` lists (``id``, ``text``, ``special``, ``start``, ``stop``;
  UTF-8 byte offsets, null for special tokens), a list of lists for one text too.
* A full queue is TEI's 429 on ``/predict`` (TEI's status for ``Overloaded``; retry libraries back off on it
  as on 503), with ``Retry-After``; zsnli's own routes keep 503 ``overloaded``.
"""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from conftest import running_app
from test_classify_array import gated_app

pytestmark = pytest.mark.anyio

TEXT = "Déjà vu: the striker scored twice."


async def test_tokenize_answers_teis_simple_tokens(bert_dir, make_app):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bert_dir)
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/tokenize", json={"inputs": TEXT})
        assert r.status_code == 200, r.text
        (tokens,) = r.json()  # a list of lists, for one text too
        assert [t["id"] for t in tokens] == tokenizer(TEXT)["input_ids"]
        assert set(tokens[0]) == {"id", "text", "special", "start", "stop"}
        assert tokens[0]["special"] and tokens[-1]["special"]
        assert (tokens[0]["start"], tokens[0]["stop"], tokens[0]["text"]) == (None, None, tokenizer.cls_token)
        raw = TEXT.encode()
        for t in tokens[1:-1]:
            assert not t["special"] and raw[t["start"]:t["stop"]].decode() == t["text"], t
        assert tokens[1]["text"].lower().startswith("d") and tokens[-2]["stop"] == len(raw)  # bytes, not chars
        r = await client.post("/tokenize", json={"inputs": [TEXT, "b"], "add_special_tokens": False})
        both = r.json()
        assert r.status_code == 200 and len(both) == 2 and not any(t["special"] for t in both[0] + both[1])
        assert [t["id"] for t in both[0]] == tokenizer(TEXT, add_special_tokens=False)["input_ids"]
        for body, field in (({"inputs": 3}, "inputs"), ({"inputs": ["a", 3]}, "inputs[1]"),
                            ({"inputs": "a", "prompt_name": "query"}, "prompt_name"),
                            ({"inputs": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
                            ({"inputs": "a", "add_special_token": False}, "add_special_token")):
            r = await client.post("/tokenize", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)


async def test_a_full_queue_is_429_on_predict_and_503_on_zsnlis_own_routes(bert_dir, make_app):
    app, holder = gated_app(bert_dir, make_app, max_labels=2, queue_capacity_pairs=4, request_share_pairs=4)
    async with running_app(app) as client:
        model = holder["model"]
        model.gate = threading.Event()
        try:
            busy = [asyncio.create_task(client.post("/classify", json={"text": TEXT, "labels": ["a", "b"]}))
                    for _ in range(2)]
            await asyncio.sleep(0.3)  # their 4 pairs fill the queue
            assert app.state.classifier.state.batcher.admitted_pairs == 4
            predict = await client.post("/predict", json={"inputs": [TEXT, "This text is about sport."]})
            classify = await client.post("/classify", json={"text": TEXT, "labels": ["sport"]})
        finally:
            model.gate.set()
        assert [(await b).status_code for b in busy] == [200, 200]
    assert predict.status_code == 429 and predict.json()["error_type"] == "overloaded", predict.text
    assert predict.headers["retry-after"] and predict.json()["error"]
    assert classify.status_code == 503 and classify.json()["error_type"] == "overloaded", classify.text
    # /docs shows the 429 on /predict with the answer's own shape (issue 40); /classify has none
    responses = app.openapi()["paths"]
    shown = responses["/predict"]["post"]["responses"]["429"]["content"]["application/json"]["example"]
    from zsnli.serving.openapi_docs import PREDICT_ERROR_RESPONSES

    source = PREDICT_ERROR_RESPONSES[429]["content"]["application/json"]["example"]
    assert set(source) == set(predict.json()) and shown["error_type"] == "overloaded"
    assert re.fullmatch(r"overloaded: queue full \(\d+ of \d+ pairs admitted\); retry later", shown["error"])
    assert re.fullmatch(r"overloaded: queue full \(\d+ of \d+ pairs admitted\); retry later", predict.json()["error"])
    assert "429" not in responses["/classify"]["post"]["responses"]


async def test_predict_takes_only_right_as_its_truncation_direction(bert_dir, make_app):
    """Any value was taken (``"sideways"`` answered 200); ``/embed`` refused all but right (a new-user pass)."""
    async with running_app(make_app(bert_dir)) as client:
        for direction, status in (("right", 200), ("Right", 200), (None, 200), ("sideways", 422), ("Left", 422),
                                  (3, 422)):
            r = await client.post("/predict", json={"inputs": ["a cat sleeps", "an animal sleeps"],
                                                    "truncation_direction": direction})
            assert r.status_code == status, (direction, r.text)
            if status == 422:
                assert r.json()["field"] == "truncation_direction" and "only right" in r.json()["error"]


def test_measuring_or_listing_a_long_texts_tokens_logs_no_indexing_warning(bert_dir, caplog):
    """/embed with truncate false and /tokenize tokenise a text in full on purpose; transformers logged "Token indices
    sequence length is longer than the specified maximum ... will result in indexing errors", which reads as a
    fault in the server's log (a new-user pass)."""
    import logging

    from transformers import AutoTokenizer

    from zsnli.runtime.embedding import SentenceEncoder
    from zsnli.serving.tei import simple_tokens

    long = "word " * 3000
    with caplog.at_level(logging.WARNING):
        assert SentenceEncoder(bert_dir).token_counts([long])[0] > 3000
        assert len(simple_tokens(AutoTokenizer.from_pretrained(str(bert_dir)), long, True)) > 3000
    assert not [r for r in caplog.records if "Token indices sequence length" in r.getMessage()]
