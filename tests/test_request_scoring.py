"""zsnli.request_scoring: request groups, the confidence calibrator, the cascade and the served scoring."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from zsnli.request_scoring import (CALIBRATOR_FEATURES, Calibrator, Cascade, RequestScoring, calibrator_features,
                                   cascade_scores, load_request_scoring, request_group)
from zsnli.scoring import ScoringConfig, ScoringConfigError, label_probabilities

DIGEST = "a" * 64


@pytest.mark.parametrize("hyps, group", [
    (["Only one."], None),
    (["This tweet is not offensive.", "This tweet is offensive."], "negation"),
    (["This review is negative.", "This review is positive."], "binary"),
    (["sport", "business", "politics"], "few"),
    ([f"label {i}" for i in range(9)], "few"),
    ([f"label {i}" for i in range(10)], "many"),
])
def test_request_group_reads_the_hypotheses_only(hyps, group):
    assert request_group(hyps) == group


def test_features_are_named_and_follow_the_scores():
    s = np.array([3.0, 1.0, 0.5])
    phi = calibrator_features(s, np.array([0.2, 0.9, 0.1]), np.array([0.5, 0.1, 0.0]), "few", 99)
    named = dict(zip(CALIBRATOR_FEATURES, phi))
    assert named["bias"] == 1.0 and named["log_k"] == pytest.approx(math.log(3))
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    assert named["top1"] == pytest.approx(p[0]) and named["margin"] == pytest.approx(p[0] - p[1])
    assert named["entropy"] == pytest.approx(-(p * np.log(p)).sum() / math.log(3))
    assert named["agree"] == 0.0  # NLI's top label (1) is not the cosine's (0)
    assert named["log_tokens"] == pytest.approx(math.log(100))
    assert (named["negation"], named["binary"], named["many"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="K >= 2"):
        calibrator_features(np.array([1.0]), np.array([1.0]), None, "few", 1)
    with pytest.raises(ValueError, match="unknown request group"):
        calibrator_features(s, s, None, "other", 1)


def test_calibrator_scales_the_group_temperature_and_never_the_argmax():
    base = ScoringConfig(temperature=2.0, k_exponent=-0.5)
    scoring = RequestScoring(base, {}, Calibrator(("bias", "margin"), (0.5, 0.25)))
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(2, 30))
        s = rng.normal(size=k) * 3
        hyps = [f"h{i}" for i in range(k)]
        p = scoring.probabilities(s, hyps)
        assert int(np.argmax(p)) == int(np.argmax(s))
        p0 = label_probabilities(s, base)
        margin = np.sort(p0)[-1] - np.sort(p0)[-2]
        t = base.temperature_for(k) * math.exp(0.5 + 0.25 * margin)
        expected = np.exp(s / t - (s / t).max())
        np.testing.assert_allclose(p, expected / expected.sum(), rtol=1e-12)


def test_without_groups_or_calibrator_the_answer_is_the_old_formula():
    config = ScoringConfig(rule="entailment", temperature=3.79, k_exponent=-0.13, embedding_weight=80.0,
                           embedding_sha256=DIGEST)
    scoring = RequestScoring(config)
    rng = np.random.default_rng(1)
    s, cos = rng.normal(size=7), rng.uniform(-0.2, 0.8, size=7)
    np.testing.assert_array_equal(scoring.probabilities(s, [f"h{i}" for i in range(7)], cos),
                                  label_probabilities(s, config, None, cos))


def test_each_group_gets_its_own_config():
    binary = ScoringConfig(temperature=0.5)
    scoring = RequestScoring(ScoringConfig(temperature=2.0), {"binary": binary})
    s = np.array([1.0, 0.0])
    np.testing.assert_allclose(scoring.probabilities(s, ["a is good", "a is bad"]), label_probabilities(s, binary))
    negation = ["it is spam", "it is not spam"]
    np.testing.assert_allclose(scoring.probabilities(s, negation), label_probabilities(s, ScoringConfig(temperature=2.0)))


def test_cascade_keeps_the_top_cosines_and_fills_the_rest():
    c = Cascade(min_labels=5, keep=2)
    assert not c.applies(4) and c.applies(5)
    np.testing.assert_array_equal(c.kept(np.array([0.1, 0.9, 0.3, 0.9, 0.0])), [1, 3])
    np.testing.assert_array_equal(c.kept(np.array([0.5, 0.5, 0.5, 0.5, 0.5])), [0, 1])  # ties: lower index
    np.testing.assert_array_equal(cascade_scores(np.array([2.0, -1.0]), np.array([1, 3]), 5), [-1, 2, -1, -1, -1])
    with pytest.raises(ValueError):
        c.kept(np.zeros(3))
    for bad in ({"min_labels": 5, "keep": 5}, {"min_labels": 5, "keep": 1}, {"min_labels": 5.0, "keep": 2}):
        with pytest.raises(ScoringConfigError):
            Cascade(**bad)


def test_from_chosen_reads_the_extensions_and_refuses_bad_ones(tmp_path):
    chosen = {"rule": "entailment", "temperature": 2.0, "k_exponent": 0.0, "embedding_weight": 10.0,
              "embedding_sha256": DIGEST,
              "groups": {"binary": {"rule": "entailment_logprob", "temperature": 1.5}},
              "calibrator": {"features": ["bias", "log_k"], "coefficients": [0.1, -0.2], "fitted_by": "nll"},
              "cascade": {"min_labels": 20, "keep": 8}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"chosen": chosen}))
    scoring, calibrated = load_request_scoring(path)
    assert calibrated and scoring.groups["binary"].rule == "entailment_logprob"
    assert scoring.calibrator.coefficients == (0.1, -0.2) and scoring.cascade == Cascade(20, 8)
    assert RequestScoring.from_chosen(scoring.to_dict()) == scoring
    assert load_request_scoring(tmp_path / "absent.json") == (RequestScoring(), False)
    for key, value in (("groups", {"huge": {}}), ("calibrator", {"features": ["bias", "nope"], "coefficients": [0, 1]}),
                       ("calibrator", {"features": ["bias"], "coefficients": [float("nan")]}),
                       ("cascade", {"min_labels": 3, "keep": 8}), ("cascade", [1, 2]),
                       ("groups", {"few": {"content_free_premise": "N/A"}})):
        path.write_text(json.dumps({"chosen": {**chosen, key: value}}))
        with pytest.raises(ScoringConfigError, match="calibration file"):
            load_request_scoring(path)
    no_cosine = {k: v for k, v in chosen.items() if k not in ("embedding_weight", "embedding_sha256", "groups")}
    path.write_text(json.dumps({"chosen": no_cosine}))
    with pytest.raises(ScoringConfigError, match="cascade needs a cosine term"):
        load_request_scoring(path)
