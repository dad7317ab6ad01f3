"""POST /classify with a JSON array: several documents, each with its own labels, answered in order.

A batch of N answers what N single calls answer (one error per bad item, the
others unharmed), under the same limits: ZSNLI_MAX_BATCH_ITEMS items, each
admitted against the queue capacity on its own.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import corpus_documents, running_app

pytestmark = pytest.mark.anyio

TEXT = "the team won the match and the player scored a goal"


async def _single(client, body) -> tuple[int, dict]:
    r = await client.post("/classify", json=body)
    return r.status_code, r.json()


async def test_a_batch_of_n_answers_as_n_single_calls(bert_dir, make_app):
    docs = corpus_documents(40, seed=3)
    docs[5] = {"id": "bad-template", "text": TEXT, "labels": ["a"], "hypothesis_template": "no slot"}
    docs[7] = {"id": 7, "text": TEXT, "candidate_labels": ["sport", ""]}
    docs[9] = "not an object"
    docs[11] = {"text": TEXT, "labels": ["sport"], "multi_lable": True}
    docs[13] = {"id": "no-text", "labels": ["sport"]}
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json=docs)
        assert r.status_code == 200 and r.headers["x-request-id"], r.text
        batch = r.json()
        assert len(batch) == len(docs)
        n_errors = 0
        for doc, got in zip(docs, batch):
            status, want = await _single(client, doc)
            if status == 200:
                assert got["id"] == want["id"]
                np.testing.assert_allclose(got["probabilities"], want["probabilities"], rtol=0, atol=1e-6)
            else:
                n_errors += 1
                want.pop("request_id")  # the single call's own id; the array's is its X-Request-ID header
                expected = {**want, "status": status}
                if isinstance(doc, dict) and "id" in doc:
                    expected["id"] = doc["id"]
                assert got == expected
        assert n_errors >= 6  # the five above and the corpus' label too long for the window
        assert batch[7]["field"] == "candidate_labels[1]" and batch[11]["field"] == "multi_lable"
        assert batch[5]["id"] == "bad-template" and "id" not in batch[9]


async def test_empty_or_too_long_array_is_one_422(bert_dir, make_app):
    async with running_app(make_app(bert_dir, max_batch_items=3)) as client:
        for body in ([], [{"text": TEXT, "labels": ["a", "b"]}] * 4):
            r = await client.post("/classify", json=body)
            assert r.status_code == 422 and r.json()["field"] == "body", r.text
        ok = await client.post("/classify", json=[{"text": TEXT, "labels": ["a", "b"]}] * 3)
        assert ok.status_code == 200 and len(ok.json()) == 3


async def test_items_over_the_queue_capacity_get_their_own_503(bert_dir, make_app):
    app = make_app(bert_dir, max_labels=2, queue_capacity_pairs=4)
    async with running_app(app) as client:
        r = await client.post("/classify", json=[{"id": i, "text": TEXT, "labels": ["a", "b"]} for i in range(3)])
        assert r.status_code == 200 and r.headers["retry-after"] == "1"
        out = r.json()
        assert [len(x.get("probabilities", [])) for x in out] == [2, 2, 0]
        assert out[2]["status"] == 503 and out[2]["error_type"] == "overloaded" and out[2]["id"] == 2
        assert app.state.classifier.state.batcher.admitted_pairs == 0
        fine = await client.post("/classify", json=[{"text": TEXT, "labels": ["a", "b"]}])
        assert "retry-after" not in fine.headers


async def test_ids_are_echoed_exactly_in_an_array(bert_dir, make_app):
    raw = b'[{"id": 1e-400, "text": "x", "labels": ["a", "b"]}, {"id": 0.10, "text": "x", "labels": ["a"]}]'
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 200 and '"id":1e-400' in r.text and '"id":0.10' in r.text
        assert json.loads(r.text)[1]["probabilities"] == [1.0]


async def test_array_documented_in_openapi(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        spec = (await client.get("/openapi.json")).json()
    body = spec["paths"]["/classify"]["post"]["requestBody"]["content"]["application/json"]
    assert "array" in body["examples"] and body["schema"]["oneOf"][1]["type"] == "array"
