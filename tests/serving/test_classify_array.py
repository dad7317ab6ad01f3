"""POST /classify with a JSON array: several documents, each with its own labels, answered in order.

A batch of N answers what N single calls answer (one error per bad item, the
others unharmed), under the same limits: ZSNLI_MAX_BATCH_ITEMS items, ZSNLI_MAX_REQUEST_PAIRS pairs in all, the
items admitted progressively within the request's share of the queue (ZSNLI_REQUEST_SHARE_PAIRS).
"""

from __future__ import annotations

import asyncio
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
                want["request_id"] = r.headers["x-request-id"]  # the single call's own id -> the array's
                expected = {**want, "status": status}
                if isinstance(doc, dict) and "id" in doc:
                    expected["id"] = doc["id"]
                assert got == expected
        assert n_errors >= 6  # the five above and the corpus' label too long for the window
        assert batch[7]["field"] == "candidate_labels[1]" and batch[11]["field"] == "multi_lable"
        assert batch[5]["id"] == "bad-template" and "id" not in batch[9]


async def test_a_key_given_twice_inside_one_item_fails_that_item_alone(bert_dir, make_app):
    """``[{ok}, {"text": "x", "text": "y", ...}]`` was one 422 for the whole array (field ``[1].text``), the good
    item lost with it; each item now gets what its single call gets (a 422 naming ``text``)."""
    good = json.dumps({"id": 1, "text": TEXT, "labels": ["sport", "cooking"]})
    twice = '{"id": "dup", "text": "x", "text": "y", "labels": ["sport", "cooking"]}'
    nested = '{"text": "x", "labels": ["sport", "cooking"], "hypothesis_template": "a {}", "hypothesis_template": "b {}"}'
    headers = {"content-type": "application/json"}
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", content=f"[{good}, {twice}, {nested}]", headers=headers)
        assert r.status_code == 200, r.text
        first, second, third = r.json()
        status, want = await _single(client, json.loads(good))
        assert status == 200 and first["probabilities"] == pytest.approx(want["probabilities"], abs=1e-6)
        for got, raw, field in ((second, twice, "text"), (third, nested, "hypothesis_template")):
            single = await client.post("/classify", content=raw, headers=headers)
            assert single.status_code == 422 and single.json()["field"] == field, single.text
            want = {**single.json(), "request_id": r.headers["x-request-id"]}
            assert {k: v for k, v in got.items() if k not in ("id", "status")} == want
            assert got["status"] == 422 and got["errors"][0]["type"] == "duplicate_key"
        assert second["id"] == "dup"
        outside = await client.post("/classify", content=f'{{"a": [{good}], "a": 1}}', headers=headers)
        assert outside.status_code == 422 and outside.json()["field"] == "a"


async def test_empty_or_too_long_array_is_one_422(bert_dir, make_app):
    async with running_app(make_app(bert_dir, max_batch_items=3)) as client:
        for body in ([], [{"text": TEXT, "labels": ["a", "b"]}] * 4):
            r = await client.post("/classify", json=body)
            assert r.status_code == 422 and r.json()["field"] == "body", r.text
        ok = await client.post("/classify", json=[{"text": TEXT, "labels": ["a", "b"]}] * 3)
        assert ok.status_code == 200 and len(ok.json()) == 3


async def test_an_array_larger_than_the_queue_is_answered_whole_within_its_share(bert_dir, make_app):
    """Items are admitted progressively: 3 items x 2 pairs through a queue of 4 pairs (it used to
    answer the third item 503: the first two had filled the queue)."""
    app = make_app(bert_dir, max_labels=2, queue_capacity_pairs=4)
    batcher_peak = []
    async with running_app(app) as client:
        batcher = app.state.classifier.state.batcher
        batcher.observers.append(lambda _: batcher_peak.append(batcher.admitted_pairs))
        r = await client.post("/classify", json=[{"id": i, "text": TEXT, "labels": ["a", "b"]} for i in range(3)])
        assert r.status_code == 200 and "retry-after" not in r.headers
        assert [len(x["probabilities"]) for x in r.json()] == [2, 2, 2]
        assert batcher.admitted_pairs == 0 and max(batcher_peak) <= 4


class GatedModel:
    """A real tiny model whose forward waits for ``gate`` (when set) and records each batch's size."""

    def __init__(self, model):
        self._model, self.gate, self.batches = model, None, []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def logits(self, batch):
        if self.gate is not None:
            self.gate.wait(20)
        self.batches.append(len(batch))
        return self._model.logits(batch)


def gated_app(bert_dir, make_app, **settings):
    from conftest import cached_loader

    holder = {}

    def loader(s):
        holder["model"] = GatedModel(cached_loader(s))
        return holder["model"]

    return make_app(bert_dir, loader=loader, **settings), holder


async def test_a_small_request_is_admitted_and_answered_beside_a_big_array(bert_dir, make_app):
    """The array holds at most ZSNLI_REQUEST_SHARE_PAIRS of the queue, so a single request beside it is
    admitted (it used to get 503 overloaded: the array's items had filled the queue) and answered while
    the array is still in progress."""
    import threading

    labels = [f"label {j}" for j in range(8)]
    app, holder = gated_app(bert_dir, make_app, max_labels=8, queue_capacity_pairs=64, request_share_pairs=16,
                            max_request_pairs=1000, token_budget=64)
    async with running_app(app) as client:
        model, batcher = holder["model"], app.state.classifier.state.batcher
        model.gate = threading.Event()
        big = asyncio.create_task(client.post("/classify", json=[
            {"id": i, "text": f"{TEXT} number {i}", "labels": labels} for i in range(20)]))  # 160 pairs
        await asyncio.sleep(0.3)
        assert 0 < batcher.admitted_pairs <= 16  # its share, not the whole queue
        small = asyncio.create_task(client.post("/classify", json={"id": "small", "text": "a short one",
                                                                   "labels": ["sport", "business"]}))
        await asyncio.sleep(0.1)
        assert batcher.admitted_pairs <= 16 + 2
        model.gate.set()
        r_small = await small
        assert r_small.status_code == 200 and len(r_small.json()["probabilities"]) == 2
        assert not big.done()  # answered while the array is still in progress
        r_big = await big
        assert r_big.status_code == 200 and "retry-after" not in r_big.headers
        assert [len(x["probabilities"]) for x in r_big.json()] == [8] * 20


async def test_an_array_over_the_request_cap_is_one_413_naming_it_and_nothing_is_computed(bert_dir, make_app):
    app, holder = gated_app(bert_dir, make_app, max_labels=4, max_request_pairs=10)
    async with running_app(app) as client:
        n_batches = len(holder["model"].batches)
        r = await client.post("/classify", json=[{"text": TEXT, "labels": ["a", "b", "c", "d"]}] * 3)  # 12 pairs
        assert r.status_code == 413, r.text
        err = r.json()
        assert err["error_type"] == "payload_too_large" and err["field"] == "body"
        assert "ZSNLI_MAX_REQUEST_PAIRS=10" in err["error"] and "12" in err["error"]
        assert len(holder["model"].batches) == n_batches  # nothing computed
        # items that fail their own checks do not count; at the cap is fine
        ok = await client.post("/classify", json=[{"text": TEXT, "labels": ["a", "b", "c", "d"]}] * 2
                               + [{"text": TEXT, "labels": ["a", "b"]}, {"text": TEXT, "labels": "not a list"}])
        assert ok.status_code == 200 and [x.get("status", 200) for x in ok.json()] == [200, 200, 200, 422]
        inference_api = await client.post("/v1/zero-shot-classification", json={
            "inputs": [TEXT] * 3, "parameters": {"candidate_labels": ["a", "b", "c", "d"]}})
        assert inference_api.status_code == 413 and "ZSNLI_MAX_REQUEST_PAIRS" in inference_api.json()["error"]


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


async def test_once_the_client_is_gone_the_rest_of_an_array_is_never_admitted(bert_dir, make_app):
    import threading

    from zsnli.errors import ApiError, ErrorType

    app, holder = gated_app(bert_dir, make_app, max_labels=4, request_share_pairs=4)
    async with running_app(app):
        service, model = app.state.classifier, holder["model"]
        model.gate = threading.Event()
        gone = asyncio.Event()
        docs = [service.preprocess(f"{TEXT} {i}", ["a", "b", "c", "d"], None, True) for i in range(5)]
        task = asyncio.create_task(service.classify_request(docs, disconnected=gone.wait))
        await asyncio.sleep(0.2)
        assert service.state.batcher.admitted_pairs == 4  # the first document only: its share
        gone.set()
        await asyncio.sleep(0.1)
        model.gate.set()
        answers = await task
        assert all(isinstance(a, ApiError) and a.error_type is ErrorType.CLIENT_GONE for a in answers), answers
        assert service.state.batcher.admitted_pairs == 0
        assert sum(model.batches) <= 4  # at most the first document's pairs were ever computed


async def test_the_array_section_of_the_docs_names_what_is_answered(bert_dir, make_app):
    """docs/api.md's array section: the keys its prose gives an answered item are the keys a served item has
    (``labels`` included), and its curl example, posted as it is, answers the documented keys item by item."""
    import re

    from conftest import REPO

    doc = (REPO / "docs" / "api.md").read_text()
    section = doc[doc.index("### Several documents in one request"):]
    section = section[:section.index("\n### ", 1)]
    prose_keys = re.findall(r'"(\w+)"', re.search(r'`(\{"id", [^`]*\})`', section).group(1))
    body = json.loads(re.search(r"-d '(\[.*\])'", section).group(1))
    documented = json.loads(re.search(r"# -> (\[.*\])", section).group(1).replace("[...]", "[]"))
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json=body)
    got = r.json()
    assert r.status_code == 200 and len(got) == len(body) == len(documented)
    assert list(got[0]) == prose_keys == list(documented[0]) and got[0]["labels"] == body[0]["candidate_labels"]
    for item, want in zip(got, documented):
        assert set(item) == set(want) and item.get("status") == want.get("status")
