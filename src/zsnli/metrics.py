"""Classification and calibration metrics shared by calibration and validation.

This module imports nothing from the rest of zsnli (only numpy and
scikit-learn), so both the build-time calibration and the validation harness
can use it without pulling in the server or the model.

Conventions used throughout:

* a *row* is one document; its probabilities are a vector over that row's
  candidate labels (rows may have different numbers of labels);
* a *class* is an integer in ``[0, n_classes)`` naming one label of a
  dataset; ``label_classes[i][j]`` maps label ``j`` of row ``i`` to its class
  (identity when every row carries the dataset's labels in the same order);
* the predicted label of a row is its arg-max, with exact ties broken
  uniformly at random by a seeded generator (the arg-max of a uniform vector
  is not a prediction, so it must not systematically favour the first label);
* the confidence of a row is its largest probability (top-1 confidence).

Definitions and sources:

* accuracy: fraction of rows whose predicted class equals the gold class.
* macro-F1: unweighted mean over *all* classes of the dataset of the per-class
  F1 = 2PR/(P+R) (scikit-learn ``f1_score(average="macro")`` with
  ``labels=range(n_classes)`` and ``zero_division=0``). A class that is never
  predicted counts with F1 = 0, and so does a class absent from both gold and
  predictions: this is why the gold labels' own macro-F1 (the ceiling) can be
  below 1 on a small sample of a many-class dataset.
* ECE (expected calibration error; Naeini, Cooper & Hauskrecht 2015, "Obtaining
  well calibrated probabilities using Bayesian binning", AAAI; in the form of
  Guo, Pleiss, Sun & Weinberger 2017, "On calibration of modern neural
  networks", ICML, eq. 3): top-1 confidences are put in M = 15 equal-width bins
  B_m = ((m-1)/M, m/M] (the first bin also holds 0), and
  ECE = sum_m |B_m|/n * |acc(B_m) - conf(B_m)|.
* calibrated macro-F1 = macro-F1 x (1 - ECE) (the project's headline quality
  figure, see DESIGN.md).
* floor: the metric of uniform probabilities over each row's labels (arg-max
  ties broken at random with a fixed seed); ceiling: the metric of the gold
  one-hot vectors; normalised = clamp((raw - floor)/(ceiling - floor), 0, 1)
  x 100.
* Wilson score interval for a binomial proportion (Wilson 1927, "Probable
  inference, the law of succession, and statistical inference", JASA 22;
  recommended over the Wald interval by Brown, Cai & DasGupta 2001,
  "Interval estimation for a binomial proportion", Statistical Science 16).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from sklearn.metrics import f1_score

N_BINS = 15
DEFAULT_SEED = 0
Z_95 = 1.959963984540054  # two-sided 95% standard normal quantile
HEADLINE_METRIC = "calibrated_macro_f1"

__all__ = [
    "N_BINS",
    "DEFAULT_SEED",
    "HEADLINE_METRIC",
    "Scorecard",
    "ReliabilityBins",
    "accuracy",
    "macro_f1",
    "argmax_random_ties",
    "reliability_bins",
    "expected_calibration_error",
    "calibrated_macro_f1",
    "normalise",
    "wilson_interval",
    "score_rows",
]


def _as_int_array(values: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def accuracy(y_true: Sequence[int] | np.ndarray, y_pred: Sequence[int] | np.ndarray) -> float:
    """Fraction of positions where ``y_pred`` equals ``y_true``.

    Both are 1-D integer sequences of the same length N (class indices).
    Returns a float in [0, 1]; raises ``ValueError`` if N is 0 or the lengths
    differ.
    """
    true = _as_int_array(y_true, "y_true")
    pred = _as_int_array(y_pred, "y_pred")
    if true.shape != pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {true.size} vs {pred.size}")
    if true.size == 0:
        raise ValueError("accuracy of zero rows is undefined")
    return float(np.mean(true == pred))


def macro_f1(y_true: Sequence[int] | np.ndarray, y_pred: Sequence[int] | np.ndarray, n_classes: int) -> float:
    """Macro-averaged F1 over all ``n_classes`` classes of the dataset.

    ``y_true`` and ``y_pred`` are 1-D integer sequences of length N with values
    in ``[0, n_classes)``. Every class counts in the mean, including classes
    never predicted or never present (their F1 is 0; scikit-learn
    ``zero_division=0``). Returns a float in [0, 1]. Raises ``ValueError`` on
    empty input, mismatched lengths or out-of-range class indices.
    """
    true = _as_int_array(y_true, "y_true")
    pred = _as_int_array(y_pred, "y_pred")
    if true.shape != pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {true.size} vs {pred.size}")
    if true.size == 0:
        raise ValueError("macro-F1 of zero rows is undefined")
    if n_classes < 1:
        raise ValueError(f"n_classes must be >= 1, got {n_classes}")
    for name, array in (("y_true", true), ("y_pred", pred)):
        if array.min() < 0 or array.max() >= n_classes:
            raise ValueError(f"{name} holds a class outside [0, {n_classes})")
    return float(
        f1_score(true, pred, labels=list(range(n_classes)), average="macro", zero_division=0)
    )


def argmax_random_ties(probabilities: Sequence[float] | np.ndarray, rng: np.random.Generator) -> int:
    """Index of the largest value of a 1-D vector; exact ties broken uniformly at random.

    ``rng`` draws once per call that has a tie (and not otherwise), so a fixed
    seed gives a reproducible sequence. Raises ``ValueError`` on an empty
    vector or one holding NaN.
    """
    vector = np.asarray(probabilities, dtype=np.float64)
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError("probabilities must be a non-empty 1-D vector")
    if np.isnan(vector).any():
        raise ValueError("probabilities hold NaN")
    best = np.flatnonzero(vector == vector.max())
    if best.size == 1:
        return int(best[0])
    return int(best[rng.integers(best.size)])


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin reliability figures over ``n_bins`` equal-width confidence bins.

    ``edges`` has length n_bins + 1 (0 .. 1); ``counts`` (int), ``confidence``
    (mean top-1 confidence) and ``accuracy`` have length n_bins; empty bins
    have count 0 and NaN means.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def ece(self) -> float:
        """sum over non-empty bins of count/n x |accuracy - confidence|."""
        total = int(self.counts.sum())
        if total == 0:
            raise ValueError("ECE of zero rows is undefined")
        filled = self.counts > 0
        gaps = np.abs(self.accuracy[filled] - self.confidence[filled])
        return float(np.sum(self.counts[filled] / total * gaps))


def reliability_bins(
    confidences: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = N_BINS,
) -> ReliabilityBins:
    """Bin top-1 confidences into ``n_bins`` equal-width bins ((m-1)/M, m/M].

    ``confidences`` are floats in [0, 1] (shape [N]); ``correct`` are booleans
    (shape [N]) saying whether the top-1 prediction was right. A confidence of
    exactly 0 falls in the first bin. Raises ``ValueError`` on mismatched
    lengths, values outside [0, 1] (beyond 1e-6) or non-finite values.
    """
    conf = np.asarray(confidences, dtype=np.float64)
    hits = np.asarray(correct, dtype=bool)
    if conf.ndim != 1 or conf.shape != hits.shape:
        raise ValueError("confidences and correct must be 1-D and of equal length")
    if not np.all(np.isfinite(conf)):
        raise ValueError("confidences must be finite")
    if conf.size and (conf.min() < -1e-6 or conf.max() > 1 + 1e-6):
        raise ValueError("confidences must lie in [0, 1]")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf = np.clip(conf, 0.0, 1.0)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # searchsorted(side="left") gives the first edge >= c, so c lands in (e[k-1], e[k]].
    index = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    counts = np.bincount(index, minlength=n_bins)
    conf_sum = np.bincount(index, weights=conf, minlength=n_bins)
    hit_sum = np.bincount(index, weights=hits.astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(counts > 0, conf_sum / np.maximum(counts, 1), np.nan)
        mean_acc = np.where(counts > 0, hit_sum / np.maximum(counts, 1), np.nan)
    return ReliabilityBins(edges=edges, counts=counts, confidence=mean_conf, accuracy=mean_acc)


def expected_calibration_error(
    confidences: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = N_BINS,
) -> float:
    """ECE over ``n_bins`` equal-width bins of top-1 confidence, weighted by bin size.

    ``confidences``: shape [N], floats in [0, 1]; ``correct``: shape [N],
    booleans. Returns a float in [0, 1]. Raises ``ValueError`` when N is 0 or
    the inputs are malformed (see `reliability_bins`).
    """
    return reliability_bins(confidences, correct, n_bins).ece


def calibrated_macro_f1(macro_f1_value: float, ece: float) -> float:
    """macro-F1 x (1 - ECE); both inputs in [0, 1]."""
    return float(macro_f1_value) * (1.0 - float(ece))


def normalise(raw: float, floor: float, ceiling: float) -> float:
    """clamp((raw - floor) / (ceiling - floor), 0, 1) x 100.

    Returns NaN when ``ceiling <= floor`` (the dataset cannot separate a
    model from chance, e.g. one label per document), so that a mean over
    datasets can skip it with ``nanmean`` rather than divide by zero.
    """
    if not ceiling > floor:
        return float("nan")
    return float(min(max((raw - floor) / (ceiling - floor), 0.0), 1.0) * 100.0)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval (low, high) for a binomial proportion successes/n.

    With p = successes/n: centre = (p + z^2/(2n)) / (1 + z^2/n) and half-width
    = z/(1 + z^2/n) x sqrt(p(1-p)/n + z^2/(4n^2)); z = 1.95996 gives 95%.
    Returns (0.0, 1.0) when n is 0. Raises ``ValueError`` if successes is
    outside [0, n].
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Scorecard:
    """All metrics of one dataset (one arm), as printed and written in reports.

    Rates are floats in [0, 1]; ``floor``, ``ceiling`` and ``normalised`` refer
    to ``metric`` (the calibrated macro-F1 by default); ``normalised`` is in
    [0, 100] or NaN (see `normalise`).
    """

    n: int
    n_classes: int
    accuracy: float
    macro_f1: float
    ece: float
    calibrated_macro_f1: float
    metric: str
    floor: float
    ceiling: float
    normalised: float

    def as_dict(self) -> dict:
        """Plain-JSON form (NaN becomes None)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def _raw_metrics(
    probabilities: Sequence[np.ndarray],
    gold_classes: np.ndarray,
    label_classes: Sequence[np.ndarray],
    n_classes: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    pred = np.empty(len(probabilities), dtype=np.int64)
    conf = np.empty(len(probabilities), dtype=np.float64)
    for i, (row, classes) in enumerate(zip(probabilities, label_classes)):
        j = argmax_random_ties(row, rng)
        pred[i] = classes[j]
        conf[i] = float(np.max(row))
    acc = accuracy(gold_classes, pred)
    f1 = macro_f1(gold_classes, pred, n_classes)
    ece = expected_calibration_error(conf, pred == gold_classes)
    return {
        "accuracy": acc,
        "macro_f1": f1,
        "ece": ece,
        "calibrated_macro_f1": calibrated_macro_f1(f1, ece),
    }


def score_rows(
    probabilities: Sequence[Sequence[float]],
    gold: Sequence[int],
    n_classes: int | None = None,
    label_classes: Sequence[Sequence[int]] | None = None,
    seed: int = DEFAULT_SEED,
    metric: str = HEADLINE_METRIC,
) -> Scorecard:
    """Score one dataset: accuracy, macro-F1, ECE, calibrated macro-F1, floor, ceiling, normalised.

    ``probabilities[i]`` is row i's vector over its K_i labels (each finite, in
    [0, 1]); ``gold[i]`` is the index (in ``[0, K_i)``) of its gold label.
    ``label_classes[i][j]`` is the dataset class of label j of row i (default:
    ``j``, i.e. every row lists the same labels in the same order);
    ``n_classes`` defaults to the largest class index + 1. The floor uses
    uniform vectors over each row's labels and a generator seeded with
    ``seed`` for the tie-break; the model's own arg-max ties use a separate
    generator with the same seed. ``metric`` names the raw figure that
    floor/ceiling/normalised refer to (one of accuracy, macro_f1,
    calibrated_macro_f1).

    Raises ``ValueError`` on zero rows, mismatched lengths, a gold index out
    of range, or an unknown ``metric``.
    """
    if metric not in ("accuracy", "macro_f1", "calibrated_macro_f1"):
        raise ValueError(f"unknown metric {metric!r}")
    rows = [np.asarray(p, dtype=np.float64) for p in probabilities]
    if not rows:
        raise ValueError("cannot score zero rows")
    if len(gold) != len(rows):
        raise ValueError(f"{len(rows)} probability rows but {len(gold)} gold labels")
    if label_classes is None:
        classes = [np.arange(r.size) for r in rows]
    else:
        if len(label_classes) != len(rows):
            raise ValueError("label_classes must have one entry per row")
        classes = [np.asarray(c, dtype=np.int64) for c in label_classes]
    gold_classes = np.empty(len(rows), dtype=np.int64)
    for i, (row, cls, g) in enumerate(zip(rows, classes, gold)):
        if row.ndim != 1 or row.size == 0 or row.size != cls.size:
            raise ValueError(f"row {i}: {row.size} probabilities for {cls.size} labels")
        if not 0 <= int(g) < row.size:
            raise ValueError(f"row {i}: gold index {g} outside [0, {row.size})")
        gold_classes[i] = cls[int(g)]
    if n_classes is None:
        n_classes = int(max(int(c.max()) for c in classes)) + 1

    model = _raw_metrics(rows, gold_classes, classes, n_classes, np.random.default_rng(seed))
    uniform = [np.full(r.size, 1.0 / r.size) for r in rows]
    floor = _raw_metrics(uniform, gold_classes, classes, n_classes, np.random.default_rng(seed))
    onehot = []
    for r, g in zip(rows, gold):
        vec = np.zeros(r.size)
        vec[int(g)] = 1.0
        onehot.append(vec)
    ceiling = _raw_metrics(onehot, gold_classes, classes, n_classes, np.random.default_rng(seed))
    return Scorecard(
        n=len(rows),
        n_classes=n_classes,
        accuracy=model["accuracy"],
        macro_f1=model["macro_f1"],
        ece=model["ece"],
        calibrated_macro_f1=model["calibrated_macro_f1"],
        metric=metric,
        floor=floor[metric],
        ceiling=ceiling[metric],
        normalised=normalise(model[metric], floor[metric], ceiling[metric]),
    )
