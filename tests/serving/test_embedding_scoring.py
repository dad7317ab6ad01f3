"""``scoring: "embedding"``, the fast path (issue 50): the sentence encoder's cosine alone, per request.

* It answers softmax(20 cos(text, label) / T(K)) with the T(K) of calibration.json's ``embedding_scoring``, on
  ``/classify`` (one object and arrays) and the Inference API routes, computing no NLI pair.
* An answer equals the same request sent alone within 1e-5, whatever else shares its batches.
* ``ZSNLI_SCORING`` sets the default of a request that names none; a request's own ``scoring`` wins.
* Without an ``embedding_scoring`` object the scoring is a 422 naming the field (and ``ZSNLI_SCORING=embedding``
  a refusal to start); the client and CLI send it.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from conftest import write_calibration

pytestmark = pytest.mark.anyio

TEXTS = ["the team won the match and the player scored a goal", "the bank cut its profit forecast",
         "a long review " + "of a film that was slow but beautiful " * 20]
LABELS = ["sport", "business", "science", "film"]
TEMPLATE = "This text is about {}."
T0, B = 1.3, 0.1


def _calibration(tmp_path, bert_dir, with_row=True):
    from zsnli.runtime.embedding import embedding_digest

    digest = embedding_digest(bert_dir)
    path = write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=0.7,
                             embedding_weight=4.0, embedding_sha256=digest)
    if with_row:
        doc = json.loads(path.read_text())
        doc["embedding_scoring"] = {"temperature": T0, "k_exponent": B, "embedding_sha256": digest}
        path.write_text(json.dumps(doc))
    return path


def _expected(bert_dir, text, hyps):
    """softmax(20 cos / T(K)) from the encoder alone, one text and its labels per forward (no batcher)."""
    from zsnli.runtime.embedding import SentenceEncoder, cosines

    enc = SentenceEncoder(bert_dir)
    t = enc.embed(enc.tokenize([text]))[0]
    labs = enc.embed(enc.tokenize(list(dict.fromkeys(hyps))))
    cos = cosines(t, labs)[[list(dict.fromkeys(hyps)).index(h) for h in hyps]]
    z = 20 * cos / (T0 * len(hyps) ** B)
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.fixture
def fast_app(tmp_path, bert_dir, deberta_dir, make_app):
    return make_app(deberta_dir, calibration_path=str(_calibration(tmp_path, bert_dir)), embedding_dir=str(bert_dir))


async def _classify(client, body):
    r = await client.post("/classify", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_embedding_scoring_is_the_cosine_alone_on_every_route(fast_app, bert_dir):
    from conftest import running_app

    async with running_app(fast_app) as client:
        health = (await client.get("/health")).json()
        assert health["default_scoring"] == "served"
        assert health["embedding_scoring"]["cascade"] == {"min_labels": 1, "keep": 0}
        stats = fast_app.state.classifier.state.batcher.stats
        for text in TEXTS:
            want = _expected(bert_dir, text, [TEMPLATE.format(lb) for lb in LABELS])
            body = {"text": text, "labels": LABELS, "hypothesis_template": TEMPLATE}
            nli_before = stats.batches_by_kind.get("nli", 0)
            fast = (await _classify(client, {**body, "scoring": "embedding"}))["probabilities"]
            assert stats.batches_by_kind.get("nli", 0) == nli_before  # no cross-encoder pair
            np.testing.assert_allclose(fast, want, atol=1e-5)
            served = (await _classify(client, body))["probabilities"]
            assert np.abs(np.array(served) - want).max() > 1e-3  # the served scoring is another one
            for route in ("/v1/zero-shot-classification", "/"):
                r = await client.post(route, json={"inputs": text, "parameters": {
                    "candidate_labels": LABELS, "hypothesis_template": TEMPLATE, "scoring": "embedding"}})
                assert r.status_code == 200, r.text
                got = dict(zip(r.json()["labels"], r.json()["scores"]))
                np.testing.assert_allclose([got[lb] for lb in LABELS], want, atol=1e-5)
        one = await _classify(client, {"text": TEXTS[0], "labels": ["only"], "scoring": "embedding"})
        assert one["probabilities"] == [1.0]


async def test_a_fast_request_uses_the_tokeniser_thread_once_and_sends_no_empty_job(fast_app, bert_dir, monkeypatch):
    """Issue 50's quiet profile: the fast path went through the tokeniser thread twice (the labels' NLI-token
    check again, for no pair) and awaited an empty second round; now the cosines' round is its only one."""
    from conftest import running_app
    from zsnli.serving import service

    calls = {"embedding_tokens": 0, "tokenize": 0, "jobs": 0}
    for name in ("embedding_tokens", "tokenize"):
        real = getattr(service, name)
        monkeypatch.setattr(service, name, lambda *a, _real=real, _name=name: calls.__setitem__(
            _name, calls[_name] + 1) or _real(*a))
    real_jobs = service._await_jobs

    async def counted_jobs(batcher, work, *args, **kwargs):
        calls["jobs"] += 1
        return await real_jobs(batcher, work, *args, **kwargs)

    monkeypatch.setattr(service, "_await_jobs", counted_jobs)
    async with running_app(fast_app) as client:
        body = {"text": TEXTS[1], "labels": LABELS, "hypothesis_template": TEMPLATE}
        fast = (await _classify(client, {**body, "scoring": "embedding"}))["probabilities"]
        assert calls == {"embedding_tokens": 1, "tokenize": 0, "jobs": 1}
        np.testing.assert_allclose(fast, _expected(bert_dir, TEXTS[1], [TEMPLATE.format(lb) for lb in LABELS]),
                                   atol=1e-5)
        await _classify(client, body)  # the served scoring (no cascade at 4 labels): one tokenise, one round
        assert calls == {"embedding_tokens": 1, "tokenize": 1, "jobs": 2}


async def test_cascade_false_with_the_fast_path_is_a_422_not_a_cross_encoder_answer(fast_app):
    """The tryout of issue 50: ``cascade: false`` with ``scoring: "embedding"`` sent every label to the cross-encoder
    and answered a mix of both scorings; the two ask for opposite things, so the request is refused."""
    from conftest import running_app

    async with running_app(fast_app) as client:
        stats = fast_app.state.classifier.state.batcher.stats
        nli_before = stats.batches_by_kind.get("nli", 0)
        for body in ({"text": TEXTS[0], "labels": LABELS, "scoring": "embedding", "cascade": False},
                     {"text": TEXTS[0], "labels": LABELS[:2], "scoring": "embedding", "cascade": False}):
            r = await client.post("/classify", json=body)
            assert r.status_code == 422 and r.json()["field"] == "cascade", r.text
        assert stats.batches_by_kind.get("nli", 0) == nli_before
        ok = await client.post("/classify", json={"text": TEXTS[0], "labels": LABELS, "scoring": "served",
                                                  "cascade": False})
        assert ok.status_code == 200, ok.text


async def test_a_fast_answer_equals_the_same_request_alone(fast_app):
    """Batched with other texts of other lengths and with served work, each answer is its own alone (1e-5)."""
    from conftest import running_app

    async with running_app(fast_app) as client:
        bodies = [{"text": t, "labels": LABELS[: 2 + i % 3], "scoring": "embedding"} for i, t in enumerate(TEXTS * 3)]
        alone = [(await _classify(client, b))["probabilities"] for b in bodies]
        served = [{"text": t, "labels": LABELS} for t in TEXTS]
        together = await asyncio.gather(*(_classify(client, b) for b in bodies + served))
        for one, got in zip(alone, together):
            np.testing.assert_allclose(got["probabilities"], one, atol=1e-5)
        array = (await client.post("/classify", json=[{**b, "id": i} for i, b in enumerate(bodies)])).json()
        for one, got in zip(alone, array):
            np.testing.assert_allclose(got["probabilities"], one, atol=1e-5)


async def test_server_default_scoring_and_the_request_override(tmp_path, bert_dir, deberta_dir, make_app):
    from conftest import running_app

    app = make_app(deberta_dir, calibration_path=str(_calibration(tmp_path, bert_dir)), embedding_dir=str(bert_dir),
                   scoring="embedding")
    async with running_app(app) as client:
        assert (await client.get("/health")).json()["default_scoring"] == "embedding"
        body = {"text": TEXTS[1], "labels": LABELS}
        default = (await _classify(client, body))["probabilities"]
        fast = (await _classify(client, {**body, "scoring": "embedding"}))["probabilities"]
        served = (await _classify(client, {**body, "scoring": "served"}))["probabilities"]
    assert default == fast and np.abs(np.array(served) - np.array(fast)).max() > 1e-3


async def test_without_an_embedding_row_the_fast_path_is_a_422(tmp_path, bert_dir, deberta_dir, make_app):
    from conftest import running_app

    app = make_app(deberta_dir, calibration_path=str(_calibration(tmp_path, bert_dir, with_row=False)),
                   embedding_dir=str(bert_dir))
    async with running_app(app) as client:
        r = await client.post("/classify", json={"text": "x", "labels": ["a", "b"], "scoring": "embedding"})
        zs = await client.post("/v1/zero-shot-classification", json={
            "inputs": "x", "parameters": {"candidate_labels": ["a", "b"], "scoring": "embedding"}})
    assert r.status_code == 422 and r.json()["field"] == "scoring" and "embedding_scoring" in r.json()["error"]
    assert zs.status_code == 422 and zs.json()["field"] == "parameters.scoring"


def test_zsnli_scoring_embedding_without_a_row_refuses_to_start(tmp_path, bert_dir, deberta_dir):
    from conftest import make_settings

    from zsnli.scoring import ScoringConfigError
    from zsnli.serving.startup import preflight

    settings = make_settings(deberta_dir, calibration_path=str(_calibration(tmp_path, bert_dir, with_row=False)),
                             embedding_dir=str(bert_dir), scoring="embedding")
    with pytest.raises(ScoringConfigError, match="ZSNLI_SCORING=embedding"):
        preflight(settings)


def test_the_scoring_names_agree_and_a_bad_setting_is_one_line():
    from zsnli.config import SCORING_NAMES, Settings, SettingsError
    from zsnli.request_scoring import SCORINGS
    from zsnli.serving.api_types import SCORINGS as API_SCORINGS

    assert SCORING_NAMES == SCORINGS == API_SCORINGS
    assert Settings.from_env({"ZSNLI_SCORING": "Embedding"}).scoring == "embedding"
    with pytest.raises(SettingsError, match="^ZSNLI_SCORING must be one of served, pipeline, embedding"):
        Settings.from_env({"ZSNLI_SCORING": "fast"})


def test_the_status_table_names_every_scoring_a_request_may_ask_for():
    """Issue 57, item 10: docs/api.md's 422 row said "`scoring` not `served` or `pipeline`", leaving `embedding` out."""
    import re
    from pathlib import Path

    from zsnli.serving.api_types import SCORINGS

    api = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    (row,) = [line for line in api.splitlines() if line.startswith("| 422 | `validation` |")]
    listed = re.search(r"`scoring` not ([^;|]*)", row).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == set(SCORINGS), listed


def test_the_client_sends_the_fast_path():
    from zsnli.client.protocol import classify_body

    assert classify_body("x", ["a", "b"], scoring="embedding")["scoring"] == "embedding"
    assert "scoring" not in classify_body("x", ["a", "b"])


def test_the_shipped_calibration_serves_the_fast_path_with_the_shipped_encoder():
    from pathlib import Path

    from zsnli.request_scoring import load_embedding_scoring, load_request_scoring
    from zsnli.runtime.embedding import embedding_digest

    repo = Path(__file__).resolve().parents[2]
    fast = load_embedding_scoring(repo / "calibration.json")
    served, _ = load_request_scoring(repo / "calibration.json")
    assert fast is not None and fast.cascade.keep == 0 and fast.default.temperature > 0
    assert fast.embedding_sha256 == served.embedding_sha256 == embedding_digest(repo / "model" / "embedding")
