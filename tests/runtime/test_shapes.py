"""zsnli.runtime.shapes: fixed forward shapes, and a row's answer alone == its answer among 32 others."""

from __future__ import annotations

import numpy as np
import pytest

from zsnli.runtime.embedding import SentenceEncoder
from zsnli.runtime.model import Encoded, NliModel
from zsnli.runtime.precision import BF16_CPU_FLAGS, cpu_flags
from zsnli.runtime.shapes import FixedShapes

NATIVE_BF16 = bool(cpu_flags() & set(BF16_CPU_FLAGS))
WORDS = "the team won match market bank shares fell science data politics election rain film".split()


def test_widths_rows_and_chunks():
    shapes = FixedShapes.for_window(100, 256)
    assert shapes.widths == (16, 32, 48, 64, 96, 100)
    assert [shapes.width(n) for n in (1, 16, 17, 64, 65, 97, 100)] == [16, 16, 32, 64, 96, 100, 100]
    assert [shapes.rows(w) for w in (16, 32, 100, 512)] == [16, 8, 2, 1]
    lengths = [20, 5, 30, 70, 99] + [3] * 17
    chunks = shapes.chunks(lengths)
    assert chunks[:3] == [(16, [1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]), (16, [20, 21]),
                          (32, [0, 2])]
    assert chunks[3:] == [(96, [3]), (100, [4])]
    with pytest.raises(ValueError, match="longer than the largest fixed-shape width 100"):
        shapes.width(101)


@pytest.mark.parametrize(("widths", "budget"), [((), 8), ((32, 16), 8), ((16, 16), 8), ((0, 8), 8), ((16,), 0)])
def test_bad_shapes_are_refused(widths, budget):
    with pytest.raises(ValueError, match="fixed-shape"):
        FixedShapes(widths, budget)


def test_fill_pads_columns_and_repeats_the_last_row():
    shapes = FixedShapes((4, 8), 32)
    inputs = {"input_ids": np.array([[5, 6, 0], [7, 0, 0]]), "attention_mask": np.array([[1, 1, 0], [1, 0, 0]])}
    out = shapes.fill(inputs, 8, pad_token_id=0)
    assert out["input_ids"].shape == out["attention_mask"].shape == (4, 8)
    assert out["input_ids"][:, :3].tolist() == [[5, 6, 0], [7, 0, 0], [7, 0, 0], [7, 0, 0]]
    assert not out["attention_mask"][:, 3:].any() and out["attention_mask"][3].tolist() == [1] + [0] * 7
    with pytest.raises(ValueError, match="a batch of 2 x 5 does not fit the fixed shape 8 x 4"):
        shapes.fill({"input_ids": np.zeros((2, 5), np.int64)}, 4, 0)


def _mixed_pairs(model, n: int, seed: int) -> list[Encoded]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(int(rng.integers(0, 60)))) for i in range(n)]
    return model.encode(texts, [f"This text is about {WORDS[i % len(WORDS)]}." for i in range(n)])


def _alone_and_in_crowd(model, shapes):
    model.shapes = shapes
    try:
        target = _mixed_pairs(model, 3, seed=1)
        others = _mixed_pairs(model, 32, seed=2)
        assert len({shapes.width(len(e)) for e in others}) >= 3  # the crowd spans several buckets
        alone = model.logits(target)
        crowd = model.logits(others[:17] + target + others[17:])[17:20]
        return alone, crowd
    finally:
        model.shapes = None


@pytest.mark.parametrize("arch", ["bert", "deberta"])
def test_fp32_fixed_shapes_alone_equals_in_a_batch_of_32(arch, bert_dir, deberta_dir):
    model = NliModel.load(bert_dir if arch == "bert" else deberta_dir, device="cpu", dtype="float32")
    alone, crowd = _alone_and_in_crowd(model, FixedShapes.for_window(model.max_length, 256))
    np.testing.assert_allclose(crowd, alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(alone, model.logits(_mixed_pairs(model, 3, seed=1)), rtol=0, atol=1e-4)


@pytest.mark.skipif(not NATIVE_BF16, reason="needs a CPU with avx512_bf16 or amx_bf16 (native bf16)")
@pytest.mark.parametrize("arch", ["bert", "deberta"])
def test_bf16_fixed_shapes_alone_equals_in_a_batch_of_32(arch, bert_dir, deberta_dir):
    model = NliModel.load(bert_dir if arch == "bert" else deberta_dir, device="cpu", dtype="bfloat16")
    alone, crowd = _alone_and_in_crowd(model, FixedShapes.for_window(model.max_length, 256))
    np.testing.assert_allclose(crowd, alone, rtol=0, atol=1e-6)


def test_encoder_fixed_shapes_alone_equals_in_a_batch(bert_dir):
    enc = SentenceEncoder(bert_dir).with_fixed_shapes(256)
    texts = [" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(i * 2)) for i in range(33)]
    seqs = enc.tokenize(texts)
    together = enc.embed(seqs)
    alone = np.stack([enc.embed([s])[0] for s in seqs])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(together, SentenceEncoder(bert_dir).embed(seqs), rtol=0, atol=1e-5)


def test_max_rows_caps_every_bucket_and_the_accelerator_rows_follow_the_budget():
    from zsnli.runtime.shapes import ROWS_REFERENCE_WIDTH, accelerator_rows

    capped = FixedShapes.for_window(512, 4096, max_rows=accelerator_rows(4096))
    assert [capped.rows(w) for w in (16, 64, 256, 512)] == [8, 8, 8, 8]
    assert [FixedShapes.for_window(512, 4096).rows(w) for w in (16, 64, 256, 512)] == [256, 64, 16, 8]  # no cap
    assert [FixedShapes((16, 64), 64, max_rows=8).rows(w) for w in (16, 64)] == [4, 1]  # the budget still binds
    assert (accelerator_rows(4096), accelerator_rows(16384), accelerator_rows(100), ROWS_REFERENCE_WIDTH) == (8, 32, 1, 512)
    assert capped.chunks([20] * 19) == [(32, list(range(8))), (32, list(range(8, 16))), (32, [16, 17, 18])]
    with pytest.raises(ValueError, match="max_rows"):
        FixedShapes((16,), 64, max_rows=0)


class _HostCopies:
    """Records the shape of every tensor copied to the host (``Tensor.cpu``) while installed."""

    def __init__(self, monkeypatch):
        import torch

        self.shapes: list[tuple[int, ...]] = []
        real = torch.Tensor.cpu

        def cpu(tensor, *a, **kw):
            self.shapes.append(tuple(tensor.shape))
            return real(tensor, *a, **kw)

        monkeypatch.setattr(torch.Tensor, "cpu", cpu)


def test_filler_rows_never_reach_the_host(bert_dir, monkeypatch):
    """A fixed-shape forward of 8 rows holding 3 real ones copies 3 rows to the host (issue 58, item 3): the
    NLI logits and the encoder's pooled vectors are cut on the device, before ``.cpu()``."""
    model = NliModel.load(bert_dir, device="cpu", dtype="float32")
    model.shapes = FixedShapes.for_window(model.max_length, 4096, max_rows=8)
    enc = SentenceEncoder(bert_dir).with_fixed_shapes(4096, max_rows=8)
    pairs = model.encode(["the team won", "the bank fell", "rain"], ["sport", "business", "weather"])
    texts = enc.tokenize(["the team won", "the bank fell", "rain"])
    copies = _HostCopies(monkeypatch)
    logits, vectors = model.logits(pairs), enc.embed(texts)
    assert logits.shape == (3, 3) and vectors.shape == (3, enc.dim)
    assert copies.shapes == [(3, 3), (3, enc.dim)]
