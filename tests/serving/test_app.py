"""POST /classify and GET /health on both tiny architectures: contract, batching invariance, startup."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading

import numpy as np
import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.app import create_app
from zsnli.serving.startup import StartupRefused
from zsnli.manifest import hash_model_dir, model_dir_digest
from zsnli.scoring import ScoringConfig, label_probabilities, multi_label_probabilities, scores_from_logits

pytestmark = pytest.mark.anyio

LABELS = ["This text is about sport.", "This text is about business.", "This text is about science.",
          "This text is about politics."]
TEXT = "The team won the match after a late goal, and the league title is theirs this season."


def direct(model, text, hyps, cfg: ScoringConfig | None = None, multi=False):
    """What the server should answer, computed one pair at a time without the batcher."""
    cfg = cfg or ScoringConfig()
    logits = np.stack([model.logits(model.encode([text], [h]))[0] for h in hyps])
    if multi:
        return multi_label_probabilities(logits, model.entail_idx, model.contra_idx)
    s = scores_from_logits(logits, cfg.rule, model.entail_idx, model.contra_idx)
    cf = None
    if cfg.content_free_premise is not None:
        cfl = np.stack([model.logits(model.encode([cfg.content_free_premise], [h]))[0] for h in hyps])
        cf = scores_from_logits(cfl, cfg.rule, model.entail_idx, model.contra_idx)
    return label_probabilities(s, cfg, cf)


async def classify(client, body):
    r = await client.post("/classify", json=body)
    assert r.status_code == 200, r.text
    return r.json()


# --------------------------------------------------------------------- contract


async def test_contract(model_dir, make_app):
    app = make_app(model_dir)
    async with running_app(app) as client:
        model = app.state.classifier.state.model
        for rid in ("doc-1", 17, 2.5, None):
            out = await classify(client, {"id": rid, "text": TEXT, "labels": LABELS})
            assert set(out) == {"id", "labels", "probabilities"} and out["labels"] == LABELS
            assert out["id"] == rid and type(out["id"]) is type(rid)
            p = np.array(out["probabilities"])
            assert p.shape == (4,) and np.all((p >= 0) & (p <= 1)) and abs(p.sum() - 1) < 1e-6
            np.testing.assert_allclose(p, direct(model, TEXT, LABELS), atol=1e-6)
        r = await client.post("/classify", json={"text": TEXT, "labels": LABELS})
        assert r.json()["id"] is None


async def test_permutation_single_and_duplicate_labels(model_dir, make_app):
    async with running_app(make_app(model_dir)) as client:
        base = np.array((await classify(client, {"id": 1, "text": TEXT, "labels": LABELS}))["probabilities"])
        perm = [2, 0, 3, 1]
        permuted = (await classify(client, {"id": 1, "text": TEXT, "labels": [LABELS[i] for i in perm]}))
        np.testing.assert_allclose(permuted["probabilities"], base[perm], atol=1e-6)
        one = await classify(client, {"id": 2, "text": TEXT, "labels": ["This text is about sport."]})
        assert one["probabilities"] == [1.0]
        dup = await classify(client, {"id": 3, "text": TEXT, "labels": [LABELS[0], LABELS[1], LABELS[0], LABELS[0]]})
        p = dup["probabilities"]
        assert p[0] == p[2] == p[3] and abs(sum(p) - 1) < 1e-6
        dup_multi = await classify(client, {"text": TEXT, "labels": [LABELS[1], LABELS[1]], "multi_label": True})
        assert dup_multi["probabilities"][0] == dup_multi["probabilities"][1]


async def test_multi_label_template_and_alias(model_dir, make_app):
    app = make_app(model_dir)
    async with running_app(app) as client:
        model = app.state.classifier.state.model
        names = ["sport", "business", "science"]
        formatted = [f"This text is about {n}." for n in names]
        multi = await classify(client, {"text": TEXT, "labels": formatted, "multi_label": True})
        p = np.array(multi["probabilities"])
        assert np.all((p >= 0) & (p <= 1))
        np.testing.assert_allclose(p, direct(model, TEXT, formatted, multi=True), atol=1e-6)
        templ = await classify(client, {"text": TEXT, "labels": names, "hypothesis_template": "This text is about {}."})
        plain = await classify(client, {"text": TEXT, "labels": formatted})
        np.testing.assert_allclose(templ["probabilities"], plain["probabilities"], atol=1e-6)
        alias = await classify(client, {"text": TEXT, "candidate_labels": names, "hypothesis_template": "This text is about {}."})
        np.testing.assert_allclose(alias["probabilities"], plain["probabilities"], atol=1e-6)
        both = await client.post("/classify", json={"text": TEXT, "labels": names, "candidate_labels": names})
        assert both.status_code == 422 and both.json()["field"] == "candidate_labels"


async def test_candidate_labels_get_the_pipeline_template_labels_stay_literal(bert_dir, make_app):
    names = ["sport", "business", "science"]
    pipeline_hyps = [f"This example is {n}." for n in names]
    async with running_app(make_app(bert_dir)) as client:
        want = await classify(client, {"text": TEXT, "labels": pipeline_hyps})
        for extra in ({}, {"hypothesis_template": None}):
            alias = await classify(client, {"text": TEXT, "candidate_labels": names, **extra})
            np.testing.assert_allclose(alias["probabilities"], want["probabilities"], atol=1e-12)
        literal = await classify(client, {"text": TEXT, "labels": names})
        assert not np.allclose(literal["probabilities"], want["probabilities"], atol=1e-6)


@pytest.mark.parametrize("body, field, resembles", [
    ({"multi_lable": True}, "multi_lable", "multi_label"),
    ({"hypothesis_templte": "About {}."}, "hypothesis_templte", "hypothesis_template"),
    ({"multiLabel": True}, "multiLabel", "multi_label"),
    ({"Hypothesis-Template": "About {}."}, "Hypothesis-Template", "hypothesis_template"),
    ({"texts": "x"}, "texts", "text"),
    ({"candidate_label": ["a"]}, "candidate_label", "candidate_labels"),
])
async def test_a_misspelt_field_is_a_422_naming_the_field_it_resembles(bert_dir, make_app, body, field, resembles):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": TEXT, "labels": LABELS, **body})
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == field and f"did you mean {resembles}?" in out["error"]
        assert out["errors"][0]["type"] == "misspelt_field"
        both = await client.post("/classify", json={"text": TEXT, "labels": LABELS, "multi_lable": 1, "idd": 2})
        assert [e["field"] for e in both.json()["errors"]] == ["multi_lable", "idd"]
        if resembles != "text":  # a parameter of the Inference API payload too
            zs = await client.post("/", json={"inputs": TEXT, "parameters": {"candidate_labels": LABELS, **body}})
            assert zs.status_code == 422 and zs.json()["field"] == "parameters." + field
            assert f"did you mean parameters.{resembles}?" in zs.json()["error"]
        top = await client.post("/", json={"input": TEXT, "parameters": {"candidate_labels": LABELS}})
        assert top.status_code == 422 and "did you mean inputs?" in top.json()["error"]


async def test_extra_fields_are_ignored(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        line = {"id": "x", "dataset": "agnews", "text": TEXT, "labels": LABELS, "label": 0, "other": {"a": [1]}}
        plain = await classify(client, {"id": "x", "text": TEXT, "labels": LABELS})
        assert await classify(client, line) == plain


async def test_text_is_cut_before_tokenising(bert_dir, make_app):
    app = make_app(bert_dir, max_text_chars=1000)
    async with running_app(app) as client:
        model = app.state.classifier.state.model
        long_text = "the market rallied and the bank shares rose " * 5000  # 220,000 chars
        out = await classify(client, {"text": long_text, "labels": LABELS})
        np.testing.assert_allclose(out["probabilities"], direct(model, long_text[:1000], LABELS), atol=1e-6)
        # truncated on the text side only: same answer as the prefix that fits
        np.testing.assert_allclose(out["probabilities"], direct(model, long_text[:400], LABELS), atol=1e-6)


# --------------------------------------------------------------------- calibration


@pytest.mark.parametrize(
    "chosen",
    [
        {"rule": "entailment_minus_contradiction", "temperature": 2.0, "k_exponent": 0.5},
        {"rule": "entailment", "temperature": 0.5, "content_free_premise": ""},
    ],
)
async def test_scoring_config_from_calibration_json(tmp_path, deberta_dir, chosen):
    model_dir = tmp_path / "model"
    shutil.copytree(deberta_dir, model_dir)
    (tmp_path / "calibration.json").write_text(json.dumps({"chosen": chosen, "candidates": []}))
    app = create_app(make_settings(model_dir), loader=cached_loader)
    async with running_app(app) as client:
        st = app.state.classifier.state
        assert st.calibrated and st.scoring.default == ScoringConfig.from_dict(chosen) and not st.scoring.groups
        out = await classify(client, {"text": TEXT, "labels": LABELS})
        np.testing.assert_allclose(out["probabilities"], direct(st.model, TEXT, LABELS, st.scoring.default), atol=1e-6)
        one = await classify(client, {"text": TEXT, "labels": LABELS[:1]})
        assert one["probabilities"] == [1.0]
        health = (await client.get("/health")).json()
        assert health["calibrated"] is True and health["scoring"]["rule"] == chosen["rule"]


async def test_broken_calibration_refuses_to_start(tmp_path, bert_dir):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    (tmp_path / "calibration.json").write_text('{"chosen": {"rule": "nope"}}')
    app = create_app(make_settings(model_dir), loader=cached_loader)
    with pytest.raises(StartupRefused, match="nope"):
        async with running_app(app):
            pass


# --------------------------------------------------------------------- batching


def _varied_requests(n: int):
    words = "the team won match market bank shares fell science data politics election".split()
    reqs = []
    for i in range(n):
        length = [0, 1, 3, 8, 20, 45, 90, 300][i % 8]
        text = " ".join(words[(i + j) % len(words)] for j in range(length))
        labels = [LABELS[(i + j) % 4] for j in range(1 + i % 4)] + [f"label number {i}"]
        reqs.append({"id": i, "text": text, "labels": labels})
    return reqs


@pytest.mark.parametrize("token_budget", [16384, 96])
async def test_alone_vs_among_31_concurrent(model_dir, make_app, token_budget):
    """Same probabilities and argmax alone and in a crowd (96: pairs of a request split over batches)."""
    target = {"id": "target", "text": TEXT + " " + TEXT, "labels": LABELS + ["Something else."]}
    others = _varied_requests(31)
    app = make_app(model_dir, token_budget=max(token_budget, 64), max_length=64, max_batch_wait_ms=20)
    async with running_app(app) as client:
        alone = np.array((await classify(client, target))["probabilities"])
        outs = await asyncio.gather(*(classify(client, r) for r in [*others[:15], target, *others[15:]]))
        crowd = np.array(outs[15]["probabilities"])
        assert outs[15]["id"] == "target"
        assert np.max(np.abs(alone - crowd)) <= 1e-4
        assert np.argmax(alone) == np.argmax(crowd)
        stats = app.state.classifier.state.batcher.stats
        assert stats.max_batch_pairs > 1  # requests really shared batches
        if token_budget == 96:
            assert stats.batches >= 10  # 5-pair request split over several batches


@pytest.mark.parametrize(("configured", "expected"), [(None, 2048), (4096, 4096)])
async def test_token_budget_defaults_to_the_devices(model_dir, make_app, configured, expected):
    """Unset ZSNLI_TOKEN_BUDGET takes the CPU default (2048, measured fastest on CPU); a set one wins."""
    app = make_app(model_dir, token_budget=configured)
    async with running_app(app) as client:
        assert app.state.classifier.state.batcher.token_budget == expected
        out = await classify(client, {"text": TEXT, "labels": LABELS})
        assert abs(sum(out["probabilities"]) - 1) < 1e-6


async def test_64_concurrent_requests_all_correct(model_dir, make_app):
    app = make_app(model_dir, token_budget=512, max_batch_wait_ms=5)
    reqs = _varied_requests(64)
    async with running_app(app) as client:
        model = app.state.classifier.state.model
        outs = await asyncio.gather(*(classify(client, r) for r in reqs))
        for req, out in zip(reqs, outs):
            assert out["id"] == req["id"]
            np.testing.assert_allclose(out["probabilities"], direct(model, req["text"], req["labels"]), atol=1e-4)
            assert np.argmax(out["probabilities"]) == np.argmax(direct(model, req["text"], req["labels"]))


async def test_stateless_same_request_same_answer(model_dir, make_app):
    async with running_app(make_app(model_dir)) as client:
        req = {"id": 5, "text": TEXT, "labels": LABELS}
        first = (await classify(client, req))["probabilities"]
        await asyncio.gather(*(classify(client, r) for r in _varied_requests(20)))
        await classify(client, {"text": "completely different", "labels": LABELS[::-1], "multi_label": True})
        again = (await classify(client, req))["probabilities"]
        np.testing.assert_allclose(again, first, atol=1e-6)
        crowd = await asyncio.gather(*(classify(client, r) for r in [*_varied_requests(10), req]))
        np.testing.assert_allclose(crowd[-1]["probabilities"], first, atol=1e-6)


# --------------------------------------------------------------------- health & startup


def _gated_app(model_dir):
    """An app whose model load waits until the returned event is set (at most 30 s)."""
    gate = threading.Event()

    def slow_loader(settings):
        gate.wait(30)
        return cached_loader(settings)

    return create_app(make_settings(model_dir), loader=slow_loader), gate


async def test_health_503_while_loading_then_200(bert_dir):
    app, gate = _gated_app(bert_dir)
    async with running_app(app, wait_ready=False) as client:
        r = await client.get("/health")
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        r = await client.post("/classify", json={"text": "a", "labels": ["b"]})
        assert r.status_code == 503 and r.json()["error_type"] == "loading" and "Retry-After" in r.headers
        gate.set()
        for _ in range(500):
            r = await client.get("/health")
            if r.status_code == 200:
                break
            await asyncio.sleep(0.01)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "ok"
        assert body["device"] == "cpu" and body["dtype"] == "float32"
        assert body["model_sha256"] == model_dir_digest(hash_model_dir(bert_dir))
        assert (await client.post("/classify", json={"text": "a", "labels": ["b"]})).status_code == 200


async def test_health_reports_load_failure(bert_dir):
    def broken_loader(settings):
        raise OSError("model.safetensors: unexpected end of file")

    app = create_app(make_settings(bert_dir), loader=broken_loader)
    async with running_app(app, wait_ready=False) as client:
        for _ in range(500):
            r = await client.get("/health")
            if r.json()["status"] != "loading":
                break
            await asyncio.sleep(0.01)
        assert r.status_code == 503
        assert r.json()["status"] == "error" and "unexpected end of file" in r.json()["reason"]
        assert "\n" not in r.json()["reason"]
        r = await client.post("/classify", json={"text": "a", "labels": ["b"]})
        assert r.status_code == 503


def _with_manifest(tmp_path, src, tamper: bool):
    model_dir = tmp_path / "model"
    shutil.copytree(src, model_dir)
    files = hash_model_dir(model_dir)
    (tmp_path / "training_manifest.json").write_text(json.dumps({"files": files}))
    if tamper:
        with open(model_dir / "config.json", "a") as handle:
            handle.write(" ")
    return model_dir, model_dir_digest(files)


async def test_manifest_match_serves_and_reports_digest(tmp_path, bert_dir):
    model_dir, digest = _with_manifest(tmp_path, bert_dir, tamper=False)
    app = create_app(make_settings(model_dir), loader=cached_loader)
    async with running_app(app) as client:
        assert (await client.get("/health")).json()["model_sha256"] == digest


async def test_refuses_manifest_mismatch(tmp_path, bert_dir, caplog):
    model_dir, _ = _with_manifest(tmp_path, bert_dir, tamper=True)
    app = create_app(make_settings(model_dir), loader=cached_loader)
    with pytest.raises(StartupRefused, match=r"config.json \(mismatch\)"):
        async with running_app(app):
            pass
    assert app.state.classifier.state.status == "error"
    assert any("refusing to start" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)
    # the development flag skips the check
    ok = create_app(make_settings(model_dir, skip_manifest_check=True), loader=cached_loader)
    async with running_app(ok) as client:
        assert (await client.get("/health")).status_code == 200


async def test_verified_flag_and_head_health(tmp_path, bert_dir):
    model_dir, _ = _with_manifest(tmp_path, bert_dir, tamper=False)
    app = create_app(make_settings(model_dir), loader=cached_loader)
    async with running_app(app) as client:
        assert (await client.get("/health")).json()["verified"] is True
        r = await client.head("/health")
        assert r.status_code == 200 and not r.content
    # default lookup finds no manifest: served unverified, and /health says so
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    async with running_app(app) as client:
        assert (await client.get("/health")).json()["verified"] is False
    skipped = create_app(make_settings(model_dir, skip_manifest_check=True), loader=cached_loader)
    async with running_app(skipped) as client:
        assert (await client.get("/health")).json()["verified"] is False


async def test_head_health_is_503_while_loading(bert_dir):
    app, gate = _gated_app(bert_dir)
    async with running_app(app, wait_ready=False) as client:
        r = await client.head("/health")
        assert r.status_code == 503 and "Retry-After" in r.headers
        gate.set()


@pytest.mark.parametrize("which", ["manifest_path", "calibration_path"])
async def test_explicit_missing_manifest_or_calibration_refuses_to_start(tmp_path, bert_dir, which):
    missing = tmp_path / "nowhere" / f"{which}.json"
    app = create_app(make_settings(bert_dir, **{which: str(missing)}), loader=cached_loader)
    env = "ZSNLI_" + which.upper()
    with pytest.raises(StartupRefused, match=f"{env}=.* does not exist") as info:
        async with running_app(app):
            pass
    assert "\n" not in str(info.value)
    assert app.state.classifier.state.status == "error"


async def test_refuses_model_without_entailment_label(tmp_path):
    from conftest import build_bert_nli

    model_dir = build_bert_nli(tmp_path / "generic", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    app = create_app(make_settings(model_dir), loader=cached_loader)
    with pytest.raises(StartupRefused, match="no entailment label"):
        async with running_app(app):
            pass


async def test_refuses_missing_model_dir(tmp_path):
    app = create_app(make_settings(tmp_path / "nothing-here"), loader=cached_loader)
    with pytest.raises(StartupRefused, match="model directory not found"):
        async with running_app(app):
            pass


async def test_openapi_documents_models_and_examples(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        spec = (await client.get("/openapi.json")).json()
        post = spec["paths"]["/classify"]["post"]
        body = post["requestBody"]["content"]["application/json"]
        one, many = body["schema"]["oneOf"]  # one request object, or an array of them
        assert {"text", "labels", "multi_label", "hypothesis_template", "id"} <= set(one["properties"])
        assert many["type"] == "array" and many["items"] == one
        assert body["examples"]
        assert "ClassifyResponse" in json.dumps(post["responses"]["200"])
        assert (await client.get("/docs")).status_code == 200


# --------------------------------------------------------------------- embedding term (issue 7)


async def test_embedding_term_from_calibration_json(tmp_path, bert_dir, deberta_dir):
    """w * cos(text, label) of the sentence encoder is added to each score before the softmax."""
    from zsnli.runtime.embedding import SentenceEncoder, embedding_digest

    model_dir = tmp_path / "model"
    shutil.copytree(deberta_dir, model_dir)
    chosen = {"rule": "entailment_minus_contradiction", "temperature": 1.5, "k_exponent": 0.0,
              "embedding_weight": 4.0, "embedding_sha256": embedding_digest(bert_dir)}
    (tmp_path / "calibration.json").write_text(json.dumps({"chosen": chosen, "candidates": []}))
    app = create_app(make_settings(model_dir, embedding_dir=str(bert_dir)), loader=cached_loader)
    async with running_app(app) as client:
        st = app.state.classifier.state
        assert st.encoder is not None
        out = await classify(client, {"text": TEXT, "labels": LABELS})
        cos = SentenceEncoder(bert_dir).cosine(TEXT, LABELS)
        assert np.ptp(cos) > 1e-4  # the term is not a constant shift, so the check below can fail
        logits = np.stack([st.model.logits(st.model.encode([TEXT], [h]))[0] for h in LABELS])
        s = scores_from_logits(logits, chosen["rule"], st.model.entail_idx, st.model.contra_idx)
        z = (s + 4.0 * cos) / 1.5
        expected = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        np.testing.assert_allclose(out["probabilities"], expected, atol=1e-5)
        without = direct(st.model, TEXT, LABELS, ScoringConfig(rule=chosen["rule"], temperature=1.5))
        assert np.abs(np.array(out["probabilities"]) - without).max() > 1e-4
        perm = [3, 1, 0, 2]
        permuted = await classify(client, {"text": TEXT, "labels": [LABELS[i] for i in perm]})
        np.testing.assert_allclose(permuted["probabilities"], np.array(out["probabilities"])[perm], atol=1e-6)


async def test_embedding_weights_other_than_calibrated_refuse_to_start(tmp_path, bert_dir, deberta_dir):
    model_dir = tmp_path / "model"
    shutil.copytree(deberta_dir, model_dir)
    chosen = {"rule": "entailment", "embedding_weight": 2.0, "embedding_sha256": "0" * 64}
    (tmp_path / "calibration.json").write_text(json.dumps({"chosen": chosen, "candidates": []}))
    app = create_app(make_settings(model_dir, embedding_dir=str(bert_dir)), loader=cached_loader)
    with pytest.raises(StartupRefused, match="embedding model"):
        async with running_app(app):
            pass


async def test_extend_adds_routes_that_share_the_service_and_error_shape(bert_dir):
    """``create_app(extend=...)``: a later route (a bake-off, /metrics) gets the same service and error answers."""
    from zsnli.errors import ApiError, ErrorType

    def extend(app, service):
        @app.post("/twice")
        async def twice():
            return {"probabilities": await service.admitted(lambda: service.classify(TEXT, LABELS[:2]))}

        @app.get("/refuse")
        async def refuse():
            raise ApiError(ErrorType.OVERLOADED, "busy")

    app = create_app(make_settings(bert_dir, retry_after_s=4), loader=cached_loader, extend=extend)
    async with running_app(app) as client:
        direct = (await classify(client, {"text": TEXT, "labels": LABELS[:2]}))["probabilities"]
        assert (await client.post("/twice")).json()["probabilities"] == direct
        r = await client.get("/refuse")
        assert r.status_code == 503 and r.headers["retry-after"] == "4" and r.json()["error_type"] == "overloaded"
