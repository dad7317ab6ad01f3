"""From arm results to the bake-off report: metrics, escalation, coverage curve, per-class F1, confusions, slices.

The report is a plain JSON-ready dict; `render` renders it and
`regression_gate` compares two of them. Per arm (``report["arms"][i]``):
``scores`` (`scorecards.Scores.as_dict`), ``timing``, ``fit``, ``peak_rss_mb``,
``escalation``, ``coverage`` (curve points), ``reliability`` (15 bins),
``per_class`` (F1 and support per dataset class), ``confusions`` (top gold ->
predicted pairs), ``slices`` (findings, ranked) and ``declared_slices`` (every
declared slice with n >= min support: what the gate checks).

Imports: numpy, scikit-learn, `zsnli.metrics`, `zsnli.harness.examples`, and `zsnli.compare`'s
`engine`, `scorecards`, `slices`, `bakeoff_runner`. `arm_details`: the same figures for one arm of a service
bake-off (``POST /v1/bakeoff``), shown when the result page opens that arm.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from zsnli.metrics import reliability_bins
from zsnli.compare.bakeoff_runner import MiB, fit_column
from zsnli.compare.engine import ArmResult, latency, rank_key, within_ceilings
from zsnli.harness.examples import Example, dataset_classes
from zsnli.compare.scorecards import score_examples
from zsnli.compare.slices import findings, score_slices

DEFAULT_TARGET_ACCURACY = 0.9
COVERAGE_POINTS = 101
TOP_CONFUSIONS = 15


@dataclass
class Escalation:
    """Keep the documents at or above ``threshold`` confidence, hand the rest to a person.

    ``threshold`` is the lowest top-1 confidence at which the kept documents
    reach ``target`` accuracy (None when no threshold does: ``reachable`` is
    False). Fractions are in [0, 1].
    """

    target: float
    reachable: bool
    threshold: float | None
    kept_fraction: float
    escalated_fraction: float
    kept_accuracy: float | None
    n: int

    def as_dict(self) -> dict:
        return asdict(self)


def escalation(confidences: Sequence[float], correct: Sequence[bool], target: float = DEFAULT_TARGET_ACCURACY) -> Escalation:
    """The lowest confidence threshold whose kept documents (confidence >= threshold) reach ``target`` accuracy.

    Thresholds considered are the observed confidences (documents with equal
    confidence are kept or escalated together). Accuracy of the kept set is
    not monotone in the threshold, so every candidate is checked and the
    lowest one that qualifies (the one keeping the most documents) wins.
    ``confidences`` and ``correct`` have shape [N]. Raises ``ValueError`` on
    empty or mismatched input or ``target`` outside (0, 1].
    """
    conf = np.asarray(confidences, dtype=np.float64)
    hits = np.asarray(correct, dtype=bool)
    if conf.size == 0 or conf.shape != hits.shape:
        raise ValueError("confidences and correct must be non-empty and of equal length")
    if not 0 < target <= 1:
        raise ValueError(f"target accuracy must be in (0, 1], got {target}")
    order = np.argsort(-conf, kind="stable")
    c, k = conf[order], hits[order]
    n = c.size
    ends = np.flatnonzero(np.append(c[1:] != c[:-1], True))  # last position of each run of equal confidence
    kept_acc = np.cumsum(k)[ends] / (ends + 1)
    ok = kept_acc >= target - 1e-12
    if not ok.any():
        return Escalation(target, False, None, 0.0, 1.0, None, n)
    best = int(ends[ok].max())
    kept = best + 1
    return Escalation(target, True, float(c[best]), kept / n, 1 - kept / n, float(np.mean(k[:kept])), n)


def coverage_curve(confidences: Sequence[float], correct: Sequence[bool], points: int = COVERAGE_POINTS) -> dict:
    """Accuracy of the documents kept when only the most confident fraction is kept (the rest go to a person).

    Returns ``{"coverage": [...], "accuracy": [...], "threshold": [...]}`` at
    up to ``points`` coverages evenly spaced over (0, 1] (ties in confidence
    are kept together, so coverages are the achievable ones nearest below).
    """
    conf = np.asarray(confidences, dtype=np.float64)
    hits = np.asarray(correct, dtype=bool)
    order = np.argsort(-conf, kind="stable")
    c, k = conf[order], hits[order]
    n = c.size
    ends = np.flatnonzero(np.append(c[1:] != c[:-1], True))  # last index of each tie group
    cum = np.cumsum(k)
    out = {"coverage": [], "accuracy": [], "threshold": []}
    for target in np.linspace(1.0 / points, 1.0, points):
        eligible = ends[(ends + 1) <= math.ceil(target * n - 1e-9)]
        if not eligible.size:
            continue
        end = int(eligible.max())
        if out["coverage"] and out["coverage"][-1] == (end + 1) / n:
            continue
        out["coverage"].append((end + 1) / n)
        out["accuracy"].append(float(cum[end] / (end + 1)))
        out["threshold"].append(float(c[end]))
    return out


def per_class(examples: Sequence[Example], predicted: Sequence[str]) -> dict[str, list[dict]]:
    """Per dataset, one ``{"label", "support", "precision", "recall", "f1"}`` per class (scikit-learn, zero_division=0)."""
    from sklearn.metrics import precision_recall_fscore_support

    vocab = dataset_classes(examples)
    out: dict[str, list[dict]] = {}
    for name, classes in vocab.items():
        idx = [i for i, e in enumerate(examples) if e.dataset == name]
        gold = [examples[i].labels[examples[i].label] for i in idx]
        pred = [predicted[i] for i in idx]
        p, r, f, s = precision_recall_fscore_support(gold, pred, labels=classes, zero_division=0)
        out[name] = [{"label": c, "support": int(s[j]), "precision": float(p[j]), "recall": float(r[j]),
                      "f1": float(f[j])} for j, c in enumerate(classes)]
    return out


def top_confusions(examples: Sequence[Example], predicted: Sequence[str], top: int = TOP_CONFUSIONS) -> list[dict]:
    """The most frequent (dataset, gold, predicted) errors, with their share of the gold class's rows."""
    support = Counter((e.dataset, e.labels[e.label]) for e in examples)
    errors = Counter((e.dataset, e.labels[e.label], p) for e, p in zip(examples, predicted) if p != e.labels[e.label])
    return [{"dataset": d, "gold": g, "predicted": p, "count": c, "share_of_gold": c / support[(d, g)]}
            for (d, g, p), c in errors.most_common(top)]


def _slices(correct, declared, discovered, min_support) -> tuple[list[dict], dict[str, dict]]:
    dec = score_slices(declared, correct, "declared", min_support)
    disc = score_slices(discovered, correct, "discovered", min_support)
    gate = {s.key: {"n": s.n, "accuracy": s.accuracy, "gap": s.gap} for s in dec if s.n >= min_support}
    return [s.as_dict() for s in findings(dec + disc)], gate


def arm_entry(result: ArmResult, examples: Sequence[Example], test_rows: Sequence[int], declared: dict,
              discovered: dict, targets: Sequence[float], min_support: int, seed: int = 0) -> dict[str, Any]:
    """The report entry of one arm; ``declared``/``discovered`` group positions in the test-row list."""
    fit_s, fit_note = fit_column(result)
    entry: dict[str, Any] = {
        "name": result.name, "type": result.type, "kind": "few-shot" if result.trains else "zero-shot",
        "cost": result.cost, "identity": result.identity, "error": result.error, "errors": result.errors[:20],
        "fit": {"seconds": fit_s, "note": fit_note, "fits": result.fits},
        "setup_s": result.setup_s, "peak_rss_mb": result.peak_rss / MiB if result.peak_rss else None,
        "rss_source": result.rss_source, "timing": latency(result, test_rows)}
    if result.error:
        return entry
    test = [examples[i] for i in test_rows]
    probs = [result.probabilities.get(i) for i in test_rows]
    scores = score_examples(test, probs, seed=seed)
    conf = [r.confidence for r in scores.rows]
    correct = [r.correct for r in scores.rows]
    predicted = [e.labels[r.predicted] for e, r in zip(test, scores.rows)]
    bins = reliability_bins(conf, correct)
    slices, gate = _slices(correct, declared, discovered, min_support)
    entry.update({
        "scores": scores.as_dict(), "n_failed": scores.n_failed,
        "escalation": [escalation(conf, correct, t).as_dict() for t in targets],
        "coverage": coverage_curve(conf, correct),
        "reliability": {"edges": bins.edges.tolist(), "counts": bins.counts.tolist(),
                        "confidence": [None if math.isnan(v) else float(v) for v in bins.confidence],
                        "accuracy": [None if math.isnan(v) else float(v) for v in bins.accuracy], "pooled_ece": bins.ece},
        "per_class": per_class(test, predicted), "confusions": top_confusions(test, predicted),
        "slices": slices, "declared_slices": gate})
    return entry


def leaderboard(arms: Sequence[dict]) -> list[dict]:
    """One row per arm, ranked by `zsnli.compare.engine.RANKING_RULE` (best first); failed arms last."""
    rows = []
    for a in arms:
        m = (a.get("scores") or {}).get("means") or {}
        rows.append({"arm": a["name"], "type": a["type"], "kind": a["kind"], "error": a.get("error"),
                     "macro_f1": m.get("macro_f1"), "accuracy": m.get("accuracy"), "ece": m.get("ece"),
                     "calibrated_macro_f1": m.get("calibrated_macro_f1"), "normalised": m.get("normalised"),
                     "p50_ms": a["timing"]["p50_ms"], "p95_ms": a["timing"]["p95_ms"],
                     "docs_per_s": a["timing"]["docs_per_s"], "fit_s": a["fit"]["seconds"], "fit_note": a["fit"]["note"],
                     "peak_rss_mb": a["peak_rss_mb"], "cost": a["cost"], "failed": a.get("n_failed")})
    return sorted(rows, key=lambda r: rank_key(r["arm"], r["macro_f1"], r["ece"], r["p50_ms"], r["error"] is not None))


def pick_within(board: Sequence[dict], max_p95_ms: float | None = None, max_fit_s: float | None = None,
                max_rss_mb: float | None = None) -> dict[str, Any]:
    """The report's ``constraints``: the limits given and the best-ranked arm inside every one of them, by the one
    rule of the ceilings (`zsnli.compare.engine.within_ceilings`: p95 ms/doc, fit seconds on these examples, peak
    RSS; a limit of None always fits, an arm whose figure was not measured does not fit a limit on it)."""
    limits = {"max_p95_ms": max_p95_ms, "max_fit_s": max_fit_s, "max_rss_mb": max_rss_mb}
    ok = within_ceilings(board, **limits)
    return {**limits, "best": ok[0] if ok else None, "fitting": ok}


SERVICE_MIN_SUPPORT = 5
"""Smallest slice a service bake-off (a few dozen of the user's examples) lists among an arm's worst slices."""


def arm_details(probabilities: Any, gold: Sequence[int], predicted: Sequence[int], label_names: Sequence[str],
                texts: Sequence[str], min_support: int = SERVICE_MIN_SUPPORT) -> dict[str, Any]:
    """What a service result shows when one arm is opened, besides its reliability diagram.

    probabilities: ``[n, k]`` over ``label_names``; gold, predicted: ``[n]`` label indices (the ranking's own
    arg-max, ties broken as it broke them); texts: ``[n]`` (only their word counts are used). Returns
    ``{"coverage": {"coverage", "accuracy", "threshold"}`` (`coverage_curve`, 4 decimals), ``"per_class":
    [{"label", "support", "precision", "recall", "f1"}]`` (scikit-learn, zero_division=0, in label order),
    ``"confusion": {"labels", "counts"}`` (``counts[g][p]``: examples of gold g predicted p) and ``"slices"``
    (the worst declared slices, gold label and length bucket, with n >= ``min_support`` and a Wilson 95% top
    below the arm's accuracy, ranked by gap x sqrt(n): `slices.findings`)}``.
    """
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    from zsnli.compare.slices import length_bucket

    p = np.asarray(probabilities, dtype=np.float64)
    gold, predicted = np.asarray(gold, dtype=int), np.asarray(predicted, dtype=int)
    k = len(label_names)
    correct = predicted == gold
    curve = coverage_curve(p.max(axis=1), correct)
    prec, rec, f1, support = precision_recall_fscore_support(gold, predicted, labels=list(range(k)), zero_division=0)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (g, text) in enumerate(zip(gold, texts)):
        groups.setdefault(("label", label_names[g]), []).append(i)
        groups.setdefault(("length", length_bucket(text)), []).append(i)
    worst = findings(score_slices(groups, correct, "declared", min_support))
    return {"coverage": {key: [round(float(v), 4) for v in vals] for key, vals in curve.items()},
            "per_class": [{"label": label_names[j], "support": int(support[j]), "precision": round(float(prec[j]), 4),
                           "recall": round(float(rec[j]), 4), "f1": round(float(f1[j]), 4)} for j in range(k)],
            "confusion": {"labels": list(label_names),
                          "counts": confusion_matrix(gold, predicted, labels=list(range(k))).tolist()},
            "slices": [{"facet": s.facet, "name": s.name, "n": s.n, "accuracy": round(s.accuracy, 4),
                        "low": round(s.low, 4), "high": round(s.high, 4), "gap": round(s.gap, 4),
                        "rank_score": round(s.rank_score, 4)} for s in worst]}
