"""zsnli.runtime.model: label mapping, the model window, padding, batch planning, the torch NliModel runtime."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from zsnli.runtime.model import (
    Encoded,
    ModelConfigError,
    NliModel,
    default_token_budget,
    label_indices,
    model_window,
    pad_to,
    plan_batches,
)

# --------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    "id2label, expected",
    [
        ({0: "entailment", 1: "neutral", 2: "contradiction"}, (0, 2)),
        ({0: "contradiction", 1: "entailment", 2: "neutral"}, (1, 0)),
        ({"0": "CONTRADICTION", "1": "NEUTRAL", "2": "ENTAILMENT"}, (2, 0)),
        ({0: "Entailed", 1: "neutral", 2: "contradicted"}, (0, 2)),
        ({0: "entailment", 1: "not_entailment"}, (0, 1)),
        ({"0": "NOT_ENTAILMENT", "1": "ENTAILMENT"}, (1, 0)),
        ({0: "non-entailment", 1: "entailment"}, (1, 0)),
        ({0: "Not entailment", 1: "Entailment"}, (1, 0)),
        ({0: "entailment", 1: "not_entailment", 2: "contradiction"}, (0, 2)),
    ],
)
def test_label_indices(id2label, expected):
    assert label_indices(id2label) == expected


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},
        {0: "entailment", 1: "neutral"},
        {0: "entailment", 1: "not_entailment", 2: "non_entailment"},
        {},
        {0: "entailment", 1: "entailment", 2: "contradiction"},
    ],
)
def test_label_indices_refuses(id2label):
    with pytest.raises(ModelConfigError):
        label_indices(id2label)


def test_plan_batches_budget():
    lengths = [5, 60, 17, 33, 8, 64, 1]
    batches = plan_batches(lengths, token_budget=128)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        width = max(((lengths[i] + 7) // 8) * 8 for i in b)
        assert width * len(b) <= 128 or len(b) == 1
    assert plan_batches([], 100) == []
    assert plan_batches([500], 100) == [[0]]



# --------------------------------------------------------------------- model


def test_load_both_architectures(bert_model, deberta_model):
    assert (bert_model.entail_idx, bert_model.contra_idx) == (0, 2)
    assert (deberta_model.entail_idx, deberta_model.contra_idx) == (1, 0)
    assert bert_model.emits_token_type_ids and not deberta_model.emits_token_type_ids
    assert bert_model.max_length == deberta_model.max_length == 64
    assert bert_model.dtype == torch.float32 and bert_model.device == "cpu"
    assert not bert_model.model.training


def test_encode_truncates_premise_only(nli_model):
    hyp = "This text is about sport."
    long_text = "the market and the team " * 200
    enc = nli_model.encode([long_text, "short"], [hyp, hyp])
    assert len(enc[0]) == nli_model.max_length
    assert len(enc[1]) < nli_model.max_length
    # the hypothesis (and final special token) is intact at the end of the truncated pair
    tail = enc[1].input_ids[-(len(enc[1]) - enc[1].input_ids.index(nli_model.tokenizer.sep_token_id) - 1):]
    assert enc[0].input_ids[-len(tail):] == tail
    if nli_model.emits_token_type_ids:
        assert enc[0].token_type_ids is not None and enc[0].token_type_ids[-1] == 1
    else:
        assert enc[0].token_type_ids is None


def test_encode_clipping_matches_plain_tokenizer(nli_model):
    texts = ["sport " * 300, "東京 😀 " * 100 + "end", "", "a b c", "  \t  "]
    hyps = ["This text is about sport."] * len(texts)
    ours = [e.input_ids for e in nli_model.encode(texts, hyps)]
    plain = nli_model.tokenizer(texts, hyps, truncation="only_first", max_length=nli_model.max_length)["input_ids"]
    assert ours == [list(p) for p in plain]


def test_hypothesis_limit_boundary(bert_model):
    limit = bert_model.max_hypothesis_tokens()
    assert limit == bert_model.max_length - 3 - 1
    assert bert_model.hypothesis_lengths(["sport " * limit, "sport " * (limit + 1)]) == [limit, limit + 1]
    enc = bert_model.encode(["a long premise " * 50], ["sport " * limit])
    assert len(enc[0]) == bert_model.max_length


def test_logits_shape_dtype_and_padding_invariance(nli_model):
    enc = nli_model.encode(["a", "the team won the match " * 5, "b c"], ["sport", "This text is about sport.", "x"])
    together = nli_model.logits(enc)
    assert together.shape == (3, 3) and together.dtype == np.float32
    alone = np.stack([nli_model.logits([e])[0] for e in enc])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert nli_model.logits([]).shape == (0, 3)


def test_predict_logits_order_and_budget(nli_model):
    premises = [("word " * n) for n in (1, 50, 3, 20, 70, 0, 9)]
    hyps = ["This text is about sport.", "business", "a", "science and technology", "x", "y", "z z"]
    small = nli_model.predict_logits(premises, hyps, token_budget=64)
    big = nli_model.predict_logits(premises, hyps, token_budget=1 << 20)
    one = np.stack([nli_model.logits(nli_model.encode([p], [h]))[0] for p, h in zip(premises, hyps)])
    np.testing.assert_allclose(small, one, atol=1e-5)
    np.testing.assert_allclose(big, one, atol=1e-5)
    with pytest.raises(ValueError):
        nli_model.predict_logits(["a"], ["sport " * 500])


def test_load_passes_dtype_explicitly(tmp_path, bert_dir):
    """Weights stored in fp16 still load as fp32 on CPU (dtype is explicit)."""
    import shutil

    from transformers import AutoModelForSequenceClassification

    half = tmp_path / "half"
    shutil.copytree(bert_dir, half)
    m = AutoModelForSequenceClassification.from_pretrained(half, local_files_only=True, dtype=torch.float16)
    m.save_pretrained(half)
    loaded = NliModel.load(half, device="cpu")
    assert loaded.dtype == torch.float32
    assert next(loaded.model.parameters()).dtype == torch.float32
    bf = NliModel.load(half, device="cpu", dtype="bf16")
    assert next(bf.model.parameters()).dtype == torch.bfloat16
    assert bf.logits(bf.encode(["a"], ["b"])).dtype == np.float32


def test_load_refuses_generic_labels(tmp_path):
    from conftest import build_bert_nli

    d = build_bert_nli(tmp_path / "generic", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ModelConfigError, match="entailment"):
        NliModel.load(d, device="cpu")


def test_encoded_len():
    assert len(Encoded([1, 2, 3])) == 3


@pytest.mark.parametrize(("device", "budget"), [("cpu", 2048), ("cuda", 4096), ("cuda:1", 4096), ("mps", 4096)])
def test_default_token_budget_by_device(device, budget):
    assert default_token_budget(device) == budget


@pytest.mark.parametrize(("tok_max", "config", "cap", "expected"), [
    (512, dict(max_position_embeddings=512, model_type="bert"), 512, 512),
    (int(1e30), dict(max_position_embeddings=514, model_type="roberta", pad_token_id=1), 1024, 512),
    (int(1e30), dict(max_position_embeddings=514, model_type="xlm-roberta", pad_token_id=1), 256, 256),
    (None, dict(), 1024, 512),
    (64, dict(max_position_embeddings=1 << 20, model_type="deberta-v2"), 512, 64),
    (4, dict(max_position_embeddings=4), 512, 8),
])
def test_model_window(tok_max, config, cap, expected):
    """Smallest of tokenizer max, positions (less RoBERTa's padding offset) and cap; sentinels ignored; >= 8."""
    assert model_window(SimpleNamespace(model_max_length=tok_max), SimpleNamespace(**config), cap) == expected


def test_model_window_of_loaded_models(bert_model, deberta_model):
    for m in (bert_model, deberta_model):
        assert model_window(m.tokenizer, m.config, 512) == m.max_length == 64
        assert model_window(m.tokenizer, m.config, 32) == 32


def test_pad_to_and_collate(nli_model):
    assert [pad_to(n) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]
    enc = nli_model.encode(["a", "the team won the match " * 3], ["sport", "x"])
    inputs = nli_model.collate(enc)
    width = pad_to(max(len(e) for e in enc))
    assert inputs["input_ids"].shape == (2, width) and inputs["input_ids"].dtype == np.int64
    assert inputs["attention_mask"].sum(axis=1).tolist() == [len(e) for e in enc]
    assert inputs["input_ids"][0, len(enc[0]):].tolist() == [nli_model.pad_token_id] * (width - len(enc[0]))
    assert ("token_type_ids" in inputs) == nli_model.emits_token_type_ids


def test_describe(bert_model):
    assert bert_model.describe() == {"backend": "torch", "device": "cpu", "dtype": "float32", "dtype_reason": None,
                                     "fixed_shapes": False, "max_rows": None,
                                     "architecture": "BertForSequenceClassification",
                                     "max_length": 64}


def test_the_transformers_floor_has_the_dtype_keyword_the_code_passes():
    """``from_pretrained(..., dtype=...)`` is transformers 4.56's name (PR 39782; ``torch_dtype`` before): while the
    code passes it, pyproject.toml's floor must be 4.56 or newer (issue 58: the floor was 4.46)."""
    import ast
    import re
    from pathlib import Path

    from packaging.version import Version

    root = Path(__file__).resolve().parents[2]
    callers = sorted(
        str(path.relative_to(root)) for path in (root / "src").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_pretrained"
        and any(k.arg == "dtype" for k in node.keywords))
    assert "src/zsnli/runtime/model.py" in callers and "src/zsnli/runtime/embedding.py" in callers
    floor = re.search(r'"transformers>=([0-9.]+)"', (root / "pyproject.toml").read_text(encoding="utf-8"))
    assert floor and Version(floor.group(1)) >= Version("4.56"), floor


def test_the_config_rules_live_in_model_config_and_the_runtime_offers_the_same_objects():
    """model.py was at the 500-line limit; the config/tokenizer rules moved to zsnli.runtime.model_config and the
    old import path still gives the very same objects (the ONNX runtime and start-up import the new home)."""
    from zsnli.runtime import model, model_config

    for name in ("label_indices", "model_window", "ModelConfigError", "DEFAULT_MAX_LENGTH"):
        assert getattr(model, name) is getattr(model_config, name), name
