"""Per-arm analyses for the bake-off: escalation to a person, and the worst slices.

Both work on the harness's per-document outcomes (top-1 confidence and
whether the top-1 label was right; see `scorecards.RowOutcome`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from zsnli.metrics import wilson_interval
from zsnli.harness.examples import Example
from zsnli.compare.scorecards import RowOutcome

DEFAULT_TARGET_ACCURACY = 0.9
DEFAULT_MIN_SLICE_N = 10
#: Text-length buckets in whitespace-separated words: (lowest, highest inclusive, name).
LENGTH_BUCKETS = ((0, 15, "1-15 words"), (16, 63, "16-63 words"), (64, 255, "64-255 words"), (256, None, "256+ words"))


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


@dataclass
class Slice:
    """A group of documents: its kind (dataset | gold label | length), name, n, accuracy and Wilson 95% interval.

    ``gap`` = the arm's pooled accuracy minus the slice's; ``rank_score`` =
    gap x sqrt(n).
    """

    kind: str
    name: str
    n: int
    accuracy: float
    low: float
    high: float
    gap: float
    rank_score: float

    def as_dict(self) -> dict:
        return asdict(self)


def length_bucket(text: str) -> str:
    """The `LENGTH_BUCKETS` name of a text's whitespace word count (empty text joins the first bucket)."""
    words = len(text.split())
    for low, high, name in LENGTH_BUCKETS:
        if words >= low and (high is None or words <= high):
            return name
    return LENGTH_BUCKETS[-1][2]  # pragma: no cover


def all_slices(examples: Sequence[Example], rows: Sequence[RowOutcome]) -> list[Slice]:
    """Every slice (per dataset, per dataset x gold label, per length bucket), unfiltered, in first-seen order."""
    if len(examples) != len(rows):
        raise ValueError("one outcome per example is needed")
    groups: dict[tuple[str, str], list[bool]] = {}
    for e, r in zip(examples, rows):
        groups.setdefault(("dataset", e.dataset), []).append(r.correct)
        groups.setdefault(("label", f"{e.dataset}: {e.labels[e.label]}"), []).append(r.correct)
        groups.setdefault(("length", length_bucket(e.text)), []).append(r.correct)
    mean = float(np.mean([r.correct for r in rows])) if rows else float("nan")
    out = []
    for (kind, name), hits in groups.items():
        n, s = len(hits), int(sum(hits))
        low, high = wilson_interval(s, n)
        acc = s / n
        gap = mean - acc
        out.append(Slice(kind, name, n, acc, low, high, gap, gap * math.sqrt(n)))
    return out


def worst_slices(examples: Sequence[Example], rows: Sequence[RowOutcome], min_n: int = DEFAULT_MIN_SLICE_N) -> list[Slice]:
    """Slices with n >= ``min_n`` whose Wilson interval top is below the arm's own pooled accuracy.

    Ranked by gap x sqrt(n), largest first (a big gap on many documents is
    the most certain weakness).
    """
    mean = float(np.mean([r.correct for r in rows])) if rows else float("nan")
    keep = [s for s in all_slices(examples, rows) if s.n >= min_n and s.high < mean]
    return sorted(keep, key=lambda s: s.rank_score, reverse=True)
