"""zsnli.scoring: ScoringConfig, calibration.json, scoring rules, probabilities."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from zsnli.scoring import (
    ScoringConfig,
    ScoringConfigError,
    aggregate_window_logits,
    label_probabilities,
    load_scoring_config,
    multi_label_probabilities,
    scores_from_logits,
)

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


def test_window_logits_fold_by_max_entailment_probability_or_by_the_mean():
    # pair 0: windows 0 and 2 (window 2 entails most by probability, though window 0 has the larger
    # entailment logit); pair 1: window 1 alone
    logits = np.array([[5.0, 0.0, 4.9], [0.1, 0.2, 0.3], [1.0, -3.0, -3.0]])
    owner = np.array([0, 1, 0])
    best = aggregate_window_logits(logits, owner, 2, "max", entail_idx=0)
    np.testing.assert_allclose(best, [[1.0, -3.0, -3.0], [0.1, 0.2, 0.3]])
    mean = aggregate_window_logits(logits, owner, 2, "mean", entail_idx=0)
    np.testing.assert_allclose(mean, [[3.0, -1.5, 0.95], [0.1, 0.2, 0.3]])
    with pytest.raises(ValueError, match="at least one window"):
        aggregate_window_logits(logits, np.array([0, 0, 0]), 2, "max", entail_idx=0)
    with pytest.raises(ValueError, match="unknown window rule"):
        aggregate_window_logits(logits, owner, 2, "median", entail_idx=0)
