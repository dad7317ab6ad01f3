"""What a user of the transformers pipeline or of text-embeddings-inference (TEI) expects (issue 32 item 7).

* ``scoring: "pipeline"`` answers exactly the pipeline's single-label scores on a server whose own scoring is
  calibrated (content-free pairs and a cosine term), on ``/classify`` (one object, arrays) and the Inference
  API routes; without the field, answers are what they were (``served``).
* ``/classify`` answers name their ``labels`` (the request's order, as sent).
* ``GET /info`` has TEI's fields; ``POST /predict`` answers TEI's ``[{"score", "label"}]`` for pairs and
  refuses a text alone, saying why.
* A Python-format template (``{label}``, ``{0}``) is refused with what to write instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import write_calibration, write_hub_cache
from test_hub_models import _pipeline_answer

pytestmark = pytest.mark.anyio

TEXTS = ["the team won the match and the player scored a goal", "the bank cut its profit forecast"]
LABELS = ["sport", "business", "science"]
TEMPLATE = "This text is about {}."
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def calibrated_app(tmp_path, bert_dir, deberta_dir, make_app):
    """The deberta model served with a calibration that uses every served step: another rule, a
    K-dependent temperature, content-free pairs and a cosine term (the bert model as sentence encoder)."""
    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment_minus_contradiction", temperature=0.7,
                              k_exponent=0.1, content_free_premise="N/A", embedding_weight=4.0,
                              embedding_sha256=embedding_digest(bert_dir))
    return make_app(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir))


async def _classify(client, body):
    r = await client.post("/classify", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_pipeline_scoring_answers_what_the_pipeline_answers(calibrated_app, deberta_dir):
    from conftest import running_app

    async with running_app(calibrated_app) as client:
        health = (await client.get("/health")).json()
        assert health["calibrated"] is True and health["scoring"]["embedding_weight"] == 4.0
        for text in TEXTS:
            want = _pipeline_answer(deberta_dir, text, LABELS, TEMPLATE, False)
            body = {"text": text, "candidate_labels": LABELS, "hypothesis_template": TEMPLATE}
            pipe = (await _classify(client, {**body, "scoring": "pipeline"}))["probabilities"]
            np.testing.assert_allclose(pipe, want, atol=2e-5)
            served = (await _classify(client, body))["probabilities"]
            assert (await _classify(client, {**body, "scoring": "served"}))["probabilities"] == served
            assert np.abs(np.array(served) - np.array(want)).max() > 1e-3  # the calibrated scoring is another one
            # the Inference API routes: parameters.scoring, the pipeline's sorted shape
            for route in ("/v1/zero-shot-classification", "/"):
                r = await client.post(route, json={"inputs": text, "parameters": {
                    "candidate_labels": LABELS, "hypothesis_template": TEMPLATE, "scoring": "pipeline"}})
                assert r.status_code == 200, r.text
                answer = r.json()
                assert answer["scores"] == sorted(answer["scores"], reverse=True)
                np.testing.assert_allclose([dict(zip(answer["labels"], answer["scores"]))[lb] for lb in LABELS],
                                           want, atol=2e-5)
        # an array mixes both, each item as it would be alone
        items = [{"id": 1, "text": TEXTS[0], "candidate_labels": LABELS, "hypothesis_template": TEMPLATE,
                  "scoring": "pipeline"},
                 {"id": 2, "text": TEXTS[0], "candidate_labels": LABELS, "hypothesis_template": TEMPLATE}]
        r = await client.post("/classify", json=items)
        alone = [await _classify(client, item) for item in items]
        for entry, one in zip(r.json(), alone):  # batched with each other: equal up to float rounding
            np.testing.assert_allclose(entry["probabilities"], one["probabilities"], atol=1e-6)
        np.testing.assert_allclose(r.json()[0]["probabilities"], _pipeline_answer(
            deberta_dir, TEXTS[0], LABELS, TEMPLATE, False), atol=2e-5)


async def test_pipeline_scoring_computes_no_content_free_pairs_and_no_embeddings(calibrated_app):
    from conftest import running_app

    async with running_app(calibrated_app) as client:
        service = calibrated_app.state.classifier
        served = service.preprocess(TEXTS[0], LABELS, TEMPLATE, False)
        pipeline = service.preprocess(TEXTS[0], LABELS, TEMPLATE, False, scoring=service.scoring_config("pipeline"))
        assert (served.n_pairs, served.content_free) == (2 * len(LABELS), "N/A")
        assert (pipeline.n_pairs, pipeline.content_free, pipeline.cascade) == (len(LABELS), None, None)
        stats = service.state.batcher.stats
        before = dict(stats.batches_by_kind)
        await _classify(client, {"text": TEXTS[1], "labels": LABELS, "scoring": "pipeline"})
        after = dict(stats.batches_by_kind)
        assert after["nli"] == before["nli"] + 1
        assert all(after.get(k, 0) == before.get(k, 0) for k in ("embedding_text", "embedding_label"))
        await _classify(client, {"text": TEXTS[1], "labels": LABELS})  # the served scoring embeds
        assert stats.batches_by_kind["embedding_text"] == after["embedding_text"] + 1


@pytest.mark.parametrize("body, field", [
    ({"text": "x", "labels": ["a", "b"], "scoring": "calibrated"}, "scoring"),
    ({"text": "x", "labels": ["a", "b"], "scoring": True}, "scoring"),
])
async def test_unknown_scoring_is_a_422_naming_the_field(bert_dir, make_app, body, field):
    from conftest import running_app

    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json=body)
        zs = await client.post("/v1/zero-shot-classification", json={
            "inputs": "x", "parameters": {"candidate_labels": ["a", "b"], "scoring": body["scoring"]}})
        misspelt = await client.post("/classify", json={"text": "x", "labels": ["a"], "scorng": "pipeline"})
    assert r.status_code == 422 and r.json()["field"] == field and "'served'" in r.json()["error"]
    assert zs.status_code == 422 and zs.json()["field"] == "parameters.scoring"
    assert misspelt.status_code == 422 and "did you mean scoring" in misspelt.json()["error"]


async def test_classify_answers_name_their_labels_in_the_requests_order(bert_dir, make_app):
    from conftest import running_app

    async with running_app(make_app(bert_dir)) as client:
        labels = ["science", "sport", "science", "caf\u00e9"]
        one = await _classify(client, {"id": 7, "text": TEXTS[0], "candidate_labels": labels,
                                       "hypothesis_template": TEMPLATE})
        assert one["labels"] == labels and len(one["probabilities"]) == 4
        literal = await client.post("/classify", content=b'{"id": 1.50, "text": "x", "labels": ["b", "a"]}',
                                    headers={"content-type": "application/json"})
        assert literal.text.startswith('{"id":1.50,"labels":["b","a"],"probabilities":[')
        # labels the tiny vocabulary can read ("q" is only [UNK] to it: refused since issue 48)
        array = (await client.post("/classify", json=[{"text": "x", "labels": ["sport", "news"]},
                                                      {"text": "x", "labels": []}])).json()
        assert array[0]["labels"] == ["sport", "news"] and "labels" not in array[1] and array[1]["status"] == 422
        surrogate = await client.post("/classify", content=b'{"text": "x", "labels": ["a\\ud800", "b"]}',
                                      headers={"content-type": "application/json"})
        assert surrogate.json()["labels"] == ["a\ufffd", "b"]


async def test_info_has_text_embeddings_inferences_fields(bert_dir, make_app, tmp_path, monkeypatch):
    from conftest import running_app

    from zsnli import __version__

    tei_fields = {"model_id", "model_sha", "model_dtype", "model_type", "max_concurrent_requests", "max_input_length",
                  "max_batch_tokens", "max_batch_requests", "max_client_batch_size", "auto_truncate",
                  "tokenization_workers", "version", "sha", "docker_label"}
    app = make_app(bert_dir, max_batch_items=17, token_budget=1024, max_connections=40)
    async with running_app(app) as client:
        info = (await client.get("/info")).json()
        health = (await client.get("/health")).json()
    assert set(info) == tei_fields | {"variant"}  # TEI's fields, and which of zsnli's models is served
    assert info["variant"] == health["variant"] == "small"
    assert info["model_id"] == health["model"] and info["model_sha"] is None and info["model_dtype"] == "float32"
    id2label = {str(i): name for i, name in enumerate(health["labels"])}
    assert info["model_type"] == {"classifier": {"id2label": id2label, "label2id": {v: int(k) for k, v in id2label.items()}}}
    assert (info["max_input_length"], info["max_batch_tokens"], info["max_client_batch_size"],
            info["max_concurrent_requests"]) == (health["max_length"], 1024, 17, 40)
    assert info["version"] == __version__ and info["auto_truncate"] is True
    # a hub model: its id and commit
    cache = tmp_path / "hub"
    write_hub_cache(cache, "org/zs", bert_dir, COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    from conftest import make_settings

    from zsnli.serving.app import create_app

    async with running_app(create_app(make_settings("/nonexistent", model_id="org/zs", model_revision=COMMIT))) as c:
        hub = (await c.get("/info")).json()
    assert (hub["model_id"], hub["model_sha"]) == ("org/zs", COMMIT)


async def test_predict_answers_the_heads_classes_of_pairs_as_tei(bert_dir, make_app, bert_model):
    from conftest import running_app

    premise, hypothesis = TEXTS[0], "This text is about sport."
    logits = bert_model.logits(bert_model.encode([premise, premise], [hypothesis, "It rains."]))
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    softmax = softmax / softmax.sum(1, keepdims=True)
    async with running_app(make_app(bert_dir)) as client:
        one = (await client.post("/predict", json={"inputs": [premise, hypothesis]})).json()
        many = (await client.post("/predict", json={"inputs": [[premise, hypothesis], [premise, "It rains."]]})).json()
        raw = (await client.post("/predict", json={"inputs": [[premise, hypothesis]], "raw_scores": True,
                                                   "truncate": True})).json()
        alone = await client.post("/predict", json={"inputs": premise})
        texts = await client.post("/predict", json={"inputs": [premise, hypothesis, "third"]})
        long = await client.post("/predict", json={"inputs": [premise, "word " * 200]})
        bad = await client.post("/predict", json={"inputs": [[premise, hypothesis], [premise, 3]]})
    names = bert_model.id2label
    assert [p["score"] for p in one] == sorted((p["score"] for p in one), reverse=True)
    assert {p["label"]: p["score"] for p in one} == pytest.approx({names[c]: softmax[0, c] for c in names}, abs=1e-6)
    assert len(many) == 2 and {p["label"]: p["score"] for p in many[1]} == \
        pytest.approx({names[c]: softmax[1, c] for c in names}, abs=1e-6)
    assert {p["label"]: p["score"] for p in raw[0]} == pytest.approx({names[c]: logits[0, c] for c in names}, abs=1e-5)
    for refused, field in ((alone, "inputs"), (texts, "inputs[0]")):
        assert refused.status_code == 422 and refused.json()["field"] == field
        assert "(premise, hypothesis) pair" in refused.json()["error"] and "/classify" in refused.json()["error"]
    assert long.status_code == 422 and long.json()["error_type"] == "label_too_long" and long.json()["field"] == "inputs"
    assert bad.status_code == 422 and bad.json()["field"] == "inputs[1]"


@pytest.mark.parametrize("template, fix", [
    ("This text is about {label}.", "write 'This text is about {}.'"),
    ("This text is about {0}.", "write 'This text is about {}.'"),
    ("{0} or {1}", "one '{}' where the label goes"),
    ("About {!r}", "write 'About {}'"),
])
async def test_python_format_templates_say_why_and_what_to_write(bert_dir, make_app, template, fix):
    from conftest import running_app

    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": "x", "candidate_labels": ["a"], "hypothesis_template": template})
        zs = await client.post("/v1/zero-shot-classification", json={
            "inputs": "x", "parameters": {"candidate_labels": ["a"], "hypothesis_template": template}})
    for answer, field in ((r, "hypothesis_template"), (zs, "parameters.hypothesis_template")):
        body = answer.json()
        assert answer.status_code == 422 and body["field"] == field, body
        assert "Python format field" in body["error"] and "not by str.format" in body["error"] and fix in body["error"]


@pytest.mark.parametrize("template, phrase", [
    ("Topic {{x}}: {}", "str.format escapes"), ("no slot", "no '{}' slot"), ("{} and {}", "2 '{}' slots"),
])
def test_other_bad_templates_name_their_problem(template, phrase):
    from zsnli.serving.api_types import template_problem

    assert phrase in template_problem(template)
    assert template_problem("This text is about {}.") is None


def test_cli_scoring_flag(tmp_path, bert_dir, bert_model, capsys):
    import json

    from conftest import direct_probabilities, verified_model_copy

    from zsnli.cli import main

    model = verified_model_copy(bert_dir, tmp_path)  # served with a content-free calibration
    argv = ["classify", TEXTS[0], "--labels", ",".join(LABELS), "--template", TEMPLATE, "--json", "--model-dir", str(model)]
    assert main(argv + ["--scoring", "pipeline"]) == 0
    pipe = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    served = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(pipe["probabilities"], direct_probabilities(bert_model, TEXTS[0], LABELS, TEMPLATE),
                               atol=1e-6)
    assert np.abs(np.array(pipe["probabilities"]) - np.array(served["probabilities"])).max() > 1e-3
    with pytest.raises(SystemExit) as info:
        main(argv + ["--scoring", "calibrated"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "\n" not in err and "--scoring" in err
