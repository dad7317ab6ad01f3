"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zsnli import metrics


def test_accuracy_simple():
    assert metrics.accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        metrics.accuracy([], [])
    with pytest.raises(ValueError):
        metrics.accuracy([0, 1], [0])


def test_macro_f1_counts_a_class_never_predicted():
    # class 0: P=1 R=1 F1=1; class 1: P=1/2 R=1 F1=2/3; class 2: never predicted, F1=0
    assert metrics.macro_f1([0, 0, 1, 2], [0, 0, 1, 1], n_classes=3) == pytest.approx(5 / 9)
    # a fourth class absent from gold and predictions still counts (F1 = 0)
    assert metrics.macro_f1([0, 0, 1, 2], [0, 0, 1, 1], n_classes=4) == pytest.approx(5 / 12)
    with pytest.raises(ValueError):
        metrics.macro_f1([0, 3], [0, 1], n_classes=3)


def test_ece_small_example_by_hand():
    conf = [0.95, 0.97, 0.50, 0.52, 0.30]
    correct = [True, False, True, True, False]
    # bin (14/15, 1]: n=2 acc=.5 conf=.96 -> 2/5*.46 = .184
    # bin (7/15, 8/15]: n=2 acc=1 conf=.51 -> 2/5*.49 = .196
    # bin (4/15, 5/15]: n=1 acc=0 conf=.30 -> 1/5*.30 = .060
    assert metrics.expected_calibration_error(conf, correct) == pytest.approx(0.44)


def test_ece_bins_are_right_closed_and_zero_goes_first():
    bins = metrics.reliability_bins([1 / 15, 0.0, 1.0], [True, True, True])
    assert bins.counts[0] == 2  # 1/15 sits on the upper edge of the first bin; 0 joins it
    assert bins.counts[14] == 1
    assert bins.counts.sum() == 3
    assert len(bins.edges) == 16


def test_ece_perfect_and_worst():
    assert metrics.expected_calibration_error([1.0, 1.0], [True, True]) == 0.0
    assert metrics.expected_calibration_error([1.0, 1.0], [False, False]) == 1.0
    with pytest.raises(ValueError):
        metrics.expected_calibration_error([1.2], [True])
    with pytest.raises(ValueError):
        metrics.expected_calibration_error([], [])


def test_calibrated_macro_f1():
    assert metrics.calibrated_macro_f1(0.8, 0.25) == pytest.approx(0.6)


def test_argmax_random_ties_is_seeded_and_uniform():
    picks = [metrics.argmax_random_ties([0.25] * 4, np.random.default_rng(s)) for s in range(400)]
    counts = np.bincount(picks, minlength=4)
    assert counts.min() > 60  # every tied index is picked, not just the first
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    seq_a = [metrics.argmax_random_ties([0.5, 0.5], rng_a) for _ in range(20)]
    seq_b = [metrics.argmax_random_ties([0.5, 0.5], rng_b) for _ in range(20)]
    assert seq_a == seq_b
    # no tie: no randomness, the maximum wins
    assert metrics.argmax_random_ties([0.1, 0.7, 0.2], np.random.default_rng(0)) == 1


def test_floor_breaks_ties_at_random_with_fixed_seed():
    n = 200
    gold = [0] * n
    probs = [[0.9, 0.1]] * n
    card = metrics.score_rows(probs, gold, n_classes=2, seed=3, metric="accuracy")
    rng = np.random.default_rng(3)
    expected = np.mean([rng.integers(2) == 0 for _ in range(n)])
    assert card.floor == pytest.approx(expected)
    assert 0.4 < card.floor < 0.6  # a first-index tie-break would give 1.0 here
    again = metrics.score_rows(probs, gold, n_classes=2, seed=3, metric="accuracy")
    assert again.floor == card.floor


def test_ceiling_is_gold_one_hot_and_below_one_when_classes_absent():
    gold = [0, 1, 0, 1]
    probs = [[0.6, 0.3, 0.1]] * 4
    card = metrics.score_rows(probs, gold, n_classes=3)
    # gold one-hot: ECE 0, macro-F1 over 3 classes with class 2 absent = 2/3
    assert card.ceiling == pytest.approx(2 / 3)
    assert card.accuracy == pytest.approx(0.5)


def test_score_rows_maps_labels_to_dataset_classes():
    # row 2 lists the labels in the other order: its label 0 is class 1
    probs = [[0.8, 0.2], [0.3, 0.7], [0.9, 0.1]]
    gold = [0, 1, 0]
    classes = [[0, 1], [0, 1], [1, 0]]
    card = metrics.score_rows(probs, gold, label_classes=classes, metric="macro_f1")
    assert card.accuracy == 1.0
    assert card.macro_f1 == 1.0
    assert card.n_classes == 2


def test_normalisation_clamps_and_scales():
    assert metrics.normalise(0.6, 0.3, 0.9) == pytest.approx(50.0)
    assert metrics.normalise(0.1, 0.3, 0.9) == 0.0
    assert metrics.normalise(1.0, 0.3, 0.9) == 100.0
    assert math.isnan(metrics.normalise(0.5, 0.5, 0.5))


def test_score_rows_normalised_uses_calibrated_f1_by_default():
    probs = [[1.0, 0.0], [0.0, 1.0]]
    card = metrics.score_rows(probs, [0, 1])
    assert card.metric == "calibrated_macro_f1"
    assert card.calibrated_macro_f1 == 1.0
    assert card.normalised == 100.0
    assert card.as_dict()["n"] == 2


def test_wilson_interval_by_hand():
    low, high = metrics.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)
    low, high = metrics.wilson_interval(0, 20)
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-4)
    assert metrics.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        metrics.wilson_interval(5, 4)
