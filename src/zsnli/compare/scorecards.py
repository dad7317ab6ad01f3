"""Per-dataset metrics of one set of answers, the headline, and their printed table.

Documents whose answer failed are scored as uniform probabilities (the
chance floor) so that a failure can never raise a score; their count is
reported beside the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from zsnli import metrics
from zsnli.harness.examples import Example, dataset_classes

MEAN_FIELDS = ("accuracy", "macro_f1", "ece", "calibrated_macro_f1", "normalised")


@dataclass
class RowOutcome:
    """What the harness concluded about one document: predicted label index, confidence, correctness."""

    predicted: int
    confidence: float
    correct: bool
    failed: bool


@dataclass
class Scores:
    """Metrics of one arm (or one self-check run) over an examples set.

    ``per_dataset`` maps dataset name -> `metrics.Scorecard`; ``means`` holds
    the unweighted mean over datasets of each of ``MEAN_FIELDS`` (normalised
    with NaN skipped); ``headline`` = ``means["normalised"]`` (0..100);
    ``rows`` aligns with the examples scored; ``n_failed`` counts documents
    scored as uniform because their answer failed.
    """

    per_dataset: dict[str, metrics.Scorecard]
    means: dict[str, float]
    rows: list[RowOutcome]
    n_failed: int
    pooled_accuracy: float
    metric: str = metrics.HEADLINE_METRIC
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> float:
        return self.means["normalised"]

    def as_dict(self) -> dict:
        """JSON-ready form (NaN -> None)."""
        return {
            "metric": self.metric,
            "headline_mean_normalised": _nan_none(self.headline),
            "means": {k: _nan_none(v) for k, v in self.means.items()},
            "pooled_accuracy": self.pooled_accuracy,
            "n_failed": self.n_failed,
            "per_dataset": {name: card.as_dict() for name, card in self.per_dataset.items()},
        }


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def score_examples(
    examples: Sequence[Example],
    probabilities: Sequence[Sequence[float] | None],
    seed: int = metrics.DEFAULT_SEED,
) -> Scores:
    """Score answers against the gold labels, per dataset.

    ``probabilities[i]`` is the answer for ``examples[i]`` (a list of K_i
    floats) or None when it failed (scored as uniform). Classes of a dataset
    are the union of its rows' label strings, so rows that list labels in
    different orders are still scored per class. Raises ``ValueError`` on
    mismatched lengths or an answer of the wrong length.
    """
    if len(examples) != len(probabilities):
        raise ValueError(f"{len(examples)} examples but {len(probabilities)} answers")
    vocab = dataset_classes(examples)
    index = {name: {label: i for i, label in enumerate(labels)} for name, labels in vocab.items()}
    by_dataset: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        by_dataset.setdefault(e.dataset, []).append(i)

    rows: list[RowOutcome | None] = [None] * len(examples)
    per_dataset: dict[str, metrics.Scorecard] = {}
    n_failed = 0
    for name, members in by_dataset.items():
        probs, gold, classes = [], [], []
        rng = np.random.default_rng(seed)  # same draws as metrics.score_rows for the model's ties
        for i in members:
            e = examples[i]
            p = probabilities[i]
            failed = p is None
            if failed:
                n_failed += 1
                p = [1.0 / len(e.labels)] * len(e.labels)
            if len(p) != len(e.labels):
                raise ValueError(f"example {e.id!r}: {len(p)} probabilities for {len(e.labels)} labels")
            vec = np.asarray(p, dtype=np.float64)
            j = metrics.argmax_random_ties(vec, rng)
            row_classes = [index[name][label] for label in e.labels]
            rows[i] = RowOutcome(j, float(vec.max()), row_classes[j] == row_classes[e.label], failed)
            probs.append(vec)
            gold.append(e.label)
            classes.append(row_classes)
        per_dataset[name] = metrics.score_rows(probs, gold, n_classes=len(vocab[name]), label_classes=classes, seed=seed)

    means = {}
    for key in MEAN_FIELDS:
        values = np.array([getattr(card, key) for card in per_dataset.values()], dtype=np.float64)
        finite = values[~np.isnan(values)]
        means[key] = float(finite.mean()) if finite.size else float("nan")
    done = [r for r in rows if r is not None]
    pooled = float(np.mean([r.correct for r in done])) if done else float("nan")
    return Scores(per_dataset, means, done, n_failed, pooled)


def scores_table(scores: Scores, title: str = "Metrics per dataset"):
    """A rich ``Table``: one row per dataset, then, over two or more, the mean row (the headline: the mean
    normalised score)."""
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col, justify in (("dataset", "left"), ("n", "right"), ("labels", "right"), ("accuracy", "right"),
                         ("macro-F1", "right"), ("ECE", "right"), ("cal. F1", "right"), ("floor", "right"),
                         ("ceiling", "right"), ("normalised", "right")):
        table.add_column(col, justify=justify)
    for name, c in scores.per_dataset.items():
        table.add_row(name, str(c.n), str(c.n_classes), f"{c.accuracy:.3f}", f"{c.macro_f1:.3f}", f"{c.ece:.3f}",
                      f"{c.calibrated_macro_f1:.3f}", f"{c.floor:.3f}", f"{c.ceiling:.3f}", _fmt_norm(c.normalised))
    m = scores.means
    if len(scores.per_dataset) < 2:  # one dataset: its row is the whole figure (no mean to show)
        return table
    table.add_section()
    table.add_row("mean over datasets", str(sum(c.n for c in scores.per_dataset.values())), "", f"{m['accuracy']:.3f}",
                  f"{m['macro_f1']:.3f}", f"{m['ece']:.3f}", f"{m['calibrated_macro_f1']:.3f}", "", "",
                  f"[bold]{_fmt_norm(m['normalised'])}[/bold]")
    return table


def _fmt_norm(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.1f}"
