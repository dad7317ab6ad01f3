"""The whole server on a fake accelerator (issue 58): torch reports a bf16 CUDA GPU, every tensor lives on the CPU.

`zsnli.bench.fake_cuda.fake_cuda` patches torch's CUDA queries and stands the CPU in for ``cuda`` in
`zsnli.runtime.devices.placement`; the real loader (`zsnli.serving.startup.default_loader`), service and HTTP app
start on the tiny models of conftest (DeBERTa as the NLI model, the tiny BERT as the sentence encoder) with a
calibration that has a cosine term, a cascade and the fast path. Held here, on the accelerator branch:

* ``/health`` and ``/info`` say ``cuda`` and ``bfloat16``, fixed shapes, the accelerator's token budget and rows;
* placement: weights on the stand-in device, the runtimes still named ``cuda``; a tensor sent to ``cuda`` any
  other way fails under the fake, so none of the run's did;
* dtype: the NLI model in bf16, the encoder in fp32 with TF32 products around its forwards only;
* warm-up: one forward of each kind of work before ``/health`` is 200;
* the encoder and the cascade: a document with ``min_labels`` labels sends ``keep`` NLI pairs, the fast path none;
* answers: default scoring, the fast path and arrays, each the same alone and among concurrent requests.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch
from conftest import make_settings, running_app, write_calibration

from zsnli.bench.fake_cuda import fake_cuda
from zsnli.runtime.model import ACCELERATOR_TOKEN_BUDGET
from zsnli.runtime.shapes import accelerator_rows
from zsnli.serving.app import create_app
from zsnli.serving.startup import default_loader

pytestmark = pytest.mark.anyio

MANY = ["sport", "business", "science", "politics", "music", "food"]  # >= min_labels: the cascade prunes
FEW = ["sport", "business", "science"]
CASCADE = {"min_labels": 4, "keep": 2}
TEXTS = ["the team won the match and the player scored a late goal", "the bank cut its profit forecast for the year",
         "a long review " + "of a film that was slow but beautiful " * 12, "new data from the space telescope"]


@pytest.fixture
def accelerated(tmp_path, bert_dir, deberta_dir):
    """``(app, records)``: the served app on the fake accelerator (fake_cuda held for the test) and the list its
    batch observer fills with every forward's `zsnli.serving.batch_types.BatchRecord`."""
    from zsnli.runtime.embedding import embedding_digest

    digest = embedding_digest(bert_dir)
    path = write_calibration(tmp_path / "calibration.json", rule="entailment", temperature=0.7, k_exponent=0.1,
                             embedding_weight=4.0, embedding_sha256=digest, cascade=CASCADE)
    doc = json.loads(path.read_text())
    doc["embedding_scoring"] = {"temperature": 1.3, "k_exponent": 0.1, "embedding_sha256": digest}
    path.write_text(json.dumps(doc))
    with fake_cuda():
        settings = make_settings(deberta_dir, dtype=None, device=None, calibration_path=str(path),
                                 embedding_dir=str(bert_dir), max_batch_wait_ms=20)
        app = create_app(settings, loader=default_loader)
        records: list = []
        app.state.classifier.batch_observers.append(records.append)
        yield app, records


async def _answers(client, body) -> list[np.ndarray]:
    """The probabilities of each document of ``body`` (one object or an array), checked finite and summing to 1."""
    r = await client.post("/classify", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    probs = [np.array(d["probabilities"]) for d in (out if isinstance(out, list) else [out])]
    assert all(np.all(np.isfinite(p)) and abs(p.sum() - 1.0) < 1e-5 for p in probs)
    return probs


async def test_health_and_info_say_cuda_bf16_and_the_accelerator_shapes(accelerated):
    app, records = accelerated
    async with running_app(app) as client:
        health = (await client.get("/health")).json()
        info = (await client.get("/info")).json()
        st = app.state.classifier.state
    rows = accelerator_rows(ACCELERATOR_TOKEN_BUDGET)
    assert (health["device"], health["dtype"], health["dtype_reason"]) == ("cuda", "bfloat16",
                                                                           "cuda device supports bf16")
    assert health["fixed_shapes"] is True
    assert (health["token_budget"], health["max_rows"]) == (ACCELERATOR_TOKEN_BUDGET, rows) == (4096, 8)
    assert health["encoder"] == {"device": "cuda", "dtype": "float32", "tf32": True, "fixed_shapes": True,
                                 "token_budget": 4096, "max_rows": 8}
    assert (info["model_dtype"], info["max_batch_tokens"]) == ("bfloat16", 4096)
    # placement: named cuda, computed where the fake stands the CPU in; dtype: bf16 NLI, fp32 encoder
    assert (st.model.device, st.encoder.device) == ("cuda", "cuda")
    assert {(p.device.type, p.dtype) for p in st.model.model.parameters()} == {("cpu", torch.bfloat16)}
    assert {(p.device.type, p.dtype) for p in st.encoder.model.parameters()} == {("cpu", torch.float32)}
    for shapes in (st.model.shapes, st.encoder.shapes):  # every width bucket runs the same rows, <= 4096 tokens
        assert {shapes.rows(w) for w in shapes.widths} == {rows}
        assert max(shapes.rows(w) * w for w in shapes.widths) <= 4096
    # warm-up: a forward of each kind before /health said ok
    assert {r.kind for r in records} == {"nli", "embedding_text", "embedding_label"}


async def test_default_fast_path_and_arrays_answer_alone_as_among_others(accelerated):
    app, records = accelerated
    bodies = [{"text": t, "labels": labels} for t in TEXTS for labels in (MANY, FEW)]
    bodies += [{"text": t, "labels": MANY, "scoring": "embedding"} for t in TEXTS]
    async with running_app(app) as client:
        alone, pairs = [], []
        for body in bodies:
            records.clear()
            alone += await _answers(client, body)
            pairs.append(sum(r.pairs for r in records if r.kind == "nli"))
        # the cascade keeps `keep` pairs of a document with min_labels labels; the fast path sends none
        assert pairs == [CASCADE["keep"], len(FEW)] * len(TEXTS) + [0] * len(TEXTS)
        records.clear()
        together = await asyncio.gather(*(_answers(client, b) for b in bodies))
        # requests really shared forwards: one text per request, so a text forward of 2+ items held 2+ requests
        assert max(r.pairs for r in records if r.kind == "embedding_text") > 1
        array = await _answers(client, bodies)
    for a, t, arr in zip(alone, together, array, strict=True):
        np.testing.assert_allclose(t[0], a, rtol=0, atol=1e-6)
        np.testing.assert_allclose(arr, a, rtol=0, atol=1e-6)


async def test_tf32_only_around_the_encoders_forwards(accelerated):
    app, _ = accelerated
    seen: dict[str, set] = {"nli": set(), "encoder": set()}
    async with running_app(app) as client:
        st = app.state.classifier.state
        matmul = torch.backends.cuda.matmul
        before = matmul.fp32_precision
        st.model.model.register_forward_pre_hook(lambda *a: seen["nli"].add(matmul.fp32_precision))
        st.encoder.model.register_forward_pre_hook(lambda *a: seen["encoder"].add(matmul.fp32_precision))
        await _answers(client, {"text": TEXTS[0], "labels": FEW})
    assert seen == {"nli": {before}, "encoder": {"tf32"}} and before != "tf32"
    assert matmul.fp32_precision == before


def test_a_tensor_sent_to_cuda_directly_fails_under_the_fake():
    """What makes the tests above hold placement: under the fake, only `placement` gets a tensor anywhere."""
    from zsnli.runtime.devices import placement

    with fake_cuda():
        assert torch.cuda.is_available() and placement("cuda:0") == "cpu"
        with pytest.raises((AssertionError, RuntimeError)):
            torch.zeros(1).to("cuda")
    assert placement("cuda") == "cuda"
