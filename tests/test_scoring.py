"""zsnli.scoring: label mapping, scoring rules, probabilities, the NliModel wrapper."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from zsnli.scoring import (
    Encoded,
    ModelConfigError,
    NliModel,
    ScoringConfig,
    ScoringConfigError,
    default_token_budget,
    label_indices,
    label_probabilities,
    load_scoring_config,
    multi_label_probabilities,
    plan_batches,
    scores_from_logits,
)

# --------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    "id2label, expected",
    [
        ({0: "entailment", 1: "neutral", 2: "contradiction"}, (0, 2)),
        ({0: "contradiction", 1: "entailment", 2: "neutral"}, (1, 0)),
        ({"0": "CONTRADICTION", "1": "NEUTRAL", "2": "ENTAILMENT"}, (2, 0)),
        ({0: "Entailed", 1: "neutral", 2: "contradicted"}, (0, 2)),
    ],
)
def test_label_indices(id2label, expected):
    assert label_indices(id2label) == expected


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},
        {0: "entailment", 1: "not_entailment"},
        {},
        {0: "entailment", 1: "entailment", 2: "contradiction"},
    ],
)
def test_label_indices_refuses(id2label):
    with pytest.raises(ModelConfigError):
        label_indices(id2label)


# --------------------------------------------------------------------- config


def test_scoring_config_roundtrip_and_temperature():
    cfg = ScoringConfig(rule="entailment_minus_contradiction", temperature=2.0, k_exponent=0.5, content_free_premise="")
    again = ScoringConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert cfg.temperature_for(4) == pytest.approx(4.0)
    assert ScoringConfig().temperature_for(100) == 1.0
    assert ScoringConfig.from_dict({"rule": "entailment", "temperature": 2, "extra": 1}).temperature == 2.0


@pytest.mark.parametrize(
    "bad",
    [{"rule": "nope"}, {"temperature": 0}, {"temperature": -1.0}, {"temperature": float("nan")}, {"k_exponent": "x"}],
)
def test_scoring_config_rejects(bad):
    with pytest.raises(ScoringConfigError):
        ScoringConfig.from_dict(bad)


def test_load_scoring_config(tmp_path):
    cfg, found = load_scoring_config(tmp_path / "calibration.json")
    assert (cfg, found) == (ScoringConfig(), False)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"chosen": {"rule": "entailment_minus_contradiction", "temperature": 1.5}, "candidates": []}))
    cfg, found = load_scoring_config(path)
    assert found and cfg.rule == "entailment_minus_contradiction" and cfg.temperature == 1.5
    path.write_text("{not json")
    with pytest.raises(ScoringConfigError):
        load_scoring_config(path)
    path.write_text(json.dumps({"candidates": []}))
    with pytest.raises(ScoringConfigError):
        load_scoring_config(path)


# --------------------------------------------------------------------- scores


def test_scores_from_logits_rules():
    logits = np.array([[2.0, 0.5, -1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    assert scores_from_logits(logits, "entailment", 0, 2).tolist() == [2.0, 0.0]
    assert scores_from_logits(logits, "entailment_minus_contradiction", 0, 2).tolist() == [3.0, 0.0]
    lp = scores_from_logits(logits, "entailment_logprob", 0, 2)
    ref = torch.log_softmax(torch.tensor(logits, dtype=torch.float64), dim=1)[:, 0].numpy()
    np.testing.assert_allclose(lp, ref, atol=1e-12)
    assert scores_from_logits(logits, "entailment", 0, 2).dtype == np.float64
    with pytest.raises(ValueError):
        scores_from_logits(logits, "bogus", 0, 2)
    with pytest.raises(ValueError):
        scores_from_logits(logits[:, :2], "entailment", 0, 2)


def test_label_probabilities_basic():
    cfg = ScoringConfig()
    p = label_probabilities(np.array([1.0, 2.0, 3.0]), cfg)
    assert p.dtype == np.float64 and p.shape == (3,)
    assert abs(p.sum() - 1) < 1e-12 and np.all(p >= 0) and np.all(p <= 1)
    np.testing.assert_allclose(p, torch.softmax(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 0).numpy())
    assert label_probabilities(np.array([5.0]), cfg).tolist() == [1.0]
    # huge scores: max-subtracted, still finite
    big = label_probabilities(np.array([1e300, -1e300, 1e300]), ScoringConfig(temperature=1e-3))
    assert np.all(np.isfinite(big)) and abs(big.sum() - 1) < 1e-12


def test_label_probabilities_temperature_and_content_free():
    s = np.array([1.0, 3.0])
    cfg = ScoringConfig(temperature=2.0, k_exponent=1.0)  # T(2) = 4
    np.testing.assert_allclose(label_probabilities(s, cfg), label_probabilities(s / 4, ScoringConfig()))
    cf = np.array([1.0, 3.0])
    np.testing.assert_allclose(label_probabilities(s, ScoringConfig(), cf), [0.5, 0.5])


@pytest.mark.parametrize("bad", [[np.nan, 1.0], [np.inf, 0.0], [-np.inf, 1.0]])
def test_label_probabilities_non_finite(bad):
    with pytest.raises(ValueError):
        label_probabilities(np.array(bad), ScoringConfig())
    with pytest.raises(ValueError):
        label_probabilities(np.array([1.0, 2.0]), ScoringConfig(), np.array(bad))


def test_label_probabilities_shape_errors():
    with pytest.raises(ValueError):
        label_probabilities(np.array([]), ScoringConfig())
    with pytest.raises(ValueError):
        label_probabilities(np.array([1.0, 2.0]), ScoringConfig(), np.array([1.0]))


def test_multi_label_probabilities_match_pipeline_convention():
    logits = np.array([[3.0, 0.1, -2.0], [-800.0, 0.0, 800.0], [800.0, 0.0, -800.0]])
    p = multi_label_probabilities(logits, 0, 2)
    ref = torch.softmax(torch.tensor(logits[:, [0, 2]]), dim=1)[:, 0].numpy()
    np.testing.assert_allclose(p, ref, atol=1e-12)
    assert np.all(np.isfinite(p))
    with pytest.raises(ValueError):
        multi_label_probabilities(np.array([[np.nan, 0, 0]]), 0, 2)


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


def test_hypothesis_fits_boundary(bert_model):
    limit = bert_model.max_hypothesis_tokens()
    assert limit == bert_model.max_length - 3 - 1
    assert bert_model.hypothesis_fits("sport " * limit)
    assert not bert_model.hypothesis_fits("sport " * (limit + 1))
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


def test_embedding_weight_adds_cosine_before_temperature():
    cfg = ScoringConfig(rule="entailment", temperature=2.0, embedding_weight=3.0, embedding_sha256="x")
    s, cos = np.array([1.0, 0.5, -1.0]), np.array([0.1, 0.9, 0.2])
    z = (s + 3.0 * cos) / 2.0
    np.testing.assert_allclose(label_probabilities(s, cfg, cosine=cos), np.exp(z) / np.exp(z).sum(), atol=1e-12)
    with pytest.raises(ValueError, match="cosine"):
        label_probabilities(s, cfg)
    with pytest.raises(ScoringConfigError, match="embedding_sha256"):
        ScoringConfig(embedding_weight=1.0)
    # w = 0 ignores any cosine given
    plain = ScoringConfig(rule="entailment", temperature=2.0)
    np.testing.assert_allclose(label_probabilities(s, plain, cosine=cos), label_probabilities(s, plain), atol=0)


@pytest.mark.parametrize(("device", "budget"), [("cpu", 2048), ("cuda", 16384), ("cuda:1", 16384), ("mps", 16384)])
def test_default_token_budget_by_device(device, budget):
    assert default_token_budget(device) == budget
