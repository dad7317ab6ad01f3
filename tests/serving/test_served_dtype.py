"""The served dtype and fixed shapes end to end: /health names the dtype and why, and a request's
probabilities are the same (1e-6) alone and among 31 concurrent requests when forwards run in fixed shapes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from conftest import running_app

from zsnli.runtime.precision import BF16_CPU_FLAGS, choose_dtype, cpu_flags
from zsnli.serving.startup import default_loader

pytestmark = pytest.mark.anyio

NATIVE_BF16 = bool(cpu_flags() & set(BF16_CPU_FLAGS))
LABELS = ["This text is about sport.", "This text is about business.", "This text is about science."]
WORDS = "the team won match market bank shares fell science data politics election".split()


def _others(n: int) -> list[dict]:
    out = []
    for i in range(n):
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range([0, 2, 5, 11, 24, 40, 90][i % 7]))
        out.append({"id": i, "text": text, "labels": LABELS[: 1 + i % 3] + [f"label number {i}"]})
    return out


async def _classify(client, body):
    r = await client.post("/classify", json=body)
    assert r.status_code == 200, r.text
    return np.array(r.json()["probabilities"])


@pytest.mark.parametrize(("dtype", "fixed"), [
    pytest.param(None, "auto", id="default"),
    pytest.param("float32", "on", id="fp32-fixed"),
    pytest.param("bfloat16", "auto", id="bf16", marks=pytest.mark.skipif(
        not NATIVE_BF16, reason="needs a CPU with avx512_bf16 or amx_bf16 (native bf16)")),
])
async def test_alone_equals_among_31_with_fixed_shapes(model_dir, make_app, dtype, fixed):
    app = make_app(model_dir, loader=default_loader, dtype=dtype, fixed_shapes=fixed, token_budget=256,
                   max_length=64, max_batch_wait_ms=20)
    target = {"id": "t", "text": "The team won the match after a late goal in the second half.", "labels": LABELS}
    async with running_app(app) as client:
        health = (await client.get("/health")).json()
        want = choose_dtype(dtype, "cpu", cpu_flags())
        assert (health["dtype"], health["dtype_reason"]) == (want.name, want.reason)
        assert health["fixed_shapes"] is (fixed == "on" or want.name != "float32")
        alone = await _classify(client, target)
        others = _others(31)
        outs = await asyncio.gather(*(_classify(client, r) for r in [*others[:15], target, *others[15:]]))
        assert app.state.classifier.state.batcher.stats.max_batch_pairs > 1  # requests really shared batches
        if health["fixed_shapes"]:
            np.testing.assert_allclose(outs[15], alone, rtol=0, atol=1e-6)
        else:  # fp32 in each batch's own shape: float rounding only
            np.testing.assert_allclose(outs[15], alone, rtol=0, atol=1e-5)
