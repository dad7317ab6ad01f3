"""The bake-off's evaluation protocol: which rows each arm may learn from and which it is scored on.

Per dataset of the examples file, one of (scikit-learn splitters, seeded):

* ``split``: one stratified train/test split (``train_fraction`` of the rows
  to train on, `sklearn.model_selection.train_test_split`);
* ``kfold``: stratified k-fold (`StratifiedKFold`, shuffled): every row is
  scored once, by a model fitted on the other folds;
* ``loo``: leave-one-out (`LeaveOneOut`): every row is scored by a model
  fitted on all the others;
* ``all``: every row is a test row and nothing is fitted (one fold per
  dataset with no training rows): for zero-shot arms only (``validate.py
  compare``).

``auto`` (the default) picks per dataset, the one fold rule of every bake-off
front end: ``loo`` when the dataset has at most ``loo_max_n`` rows or its
smallest class has a single row; else ``split`` when its smallest class has
at least ``min_class_for_split`` rows (None: never); else ``kfold`` with
k = min(folds, smallest class). ``validate.py bakeoff`` runs it with
``loo_max_n = 0`` and ``min_class_for_split = 8`` by default; ``POST
/v1/bakeoff`` with `SERVICE_PROTOCOL` (every example scored once: leave-one-out
up to 30 examples, else stratified 5-fold).

Every test row belongs to exactly one fold, and a fold's training rows
never include its test rows (`Plan.check`). Zero-shot arms are scored on
exactly the same test rows (`Plan.test_rows`), without fitting.

Imports: numpy, scikit-learn, `zsnli.harness.examples`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from zsnli.harness.examples import Example

PROTOCOLS = ("auto", "split", "kfold", "loo", "all")
DEFAULT_TRAIN_FRACTION = 0.5
DEFAULT_FOLDS = 5
DEFAULT_MIN_CLASS_FOR_SPLIT = 8
DEFAULT_LOO_MAX_N = 0

SERVICE_PROTOCOL = {"protocol": "auto", "seed": 0, "folds": 5, "loo_max_n": 30, "min_class_for_split": None}
"""The bake-off service's settings of `make_plan`: no split, so every example is scored exactly once."""


class ProtocolError(ValueError):
    """The protocol cannot be applied (bad setting, or a dataset too small for the method asked for)."""


@dataclass(frozen=True)
class Fold:
    """One fit/score unit: indices into the examples list of one dataset's training and test rows."""

    dataset: str
    index: int
    train: tuple[int, ...]
    test: tuple[int, ...]


@dataclass
class Plan:
    """All folds of all datasets, plus the method used per dataset (``{"method", "folds", "n"}``)."""

    folds: list[Fold]
    methods: dict[str, dict] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    @property
    def test_rows(self) -> list[int]:
        """Every scored row, sorted (each appears in exactly one fold's test set)."""
        return sorted(i for f in self.folds for i in f.test)

    def check(self) -> None:
        """Raise ``ProtocolError`` if a fold trains on one of its test rows or a row is scored twice."""
        seen: set[int] = set()
        for f in self.folds:
            if set(f.train) & set(f.test):
                raise ProtocolError(f"{f.dataset} fold {f.index}: training rows include test rows")
            if seen & set(f.test):
                raise ProtocolError(f"{f.dataset} fold {f.index}: a row is scored in two folds")
            seen |= set(f.test)

    def as_dict(self) -> dict:
        return {"settings": self.settings, "per_dataset": self.methods, "n_test_rows": len(self.test_rows)}


def _method(counts: Counter, protocol: str, folds: int, min_class_for_split: int | None,
            loo_max_n: int) -> tuple[str, int]:
    smallest = min(counts.values())
    if protocol == "auto":
        if sum(counts.values()) <= loo_max_n or smallest < 2:
            protocol = "loo"
        elif min_class_for_split is not None and smallest >= min_class_for_split:
            return "split", 1
        else:
            protocol = "kfold"
    if protocol == "kfold":
        k = min(folds, smallest)
        if k < 2:
            raise ProtocolError(f"kfold needs at least 2 rows per class, the smallest class has {smallest}")
        return "kfold", k
    if protocol == "all":
        return "all", 1
    if protocol == "split":
        if smallest < 2:
            raise ProtocolError(f"a stratified split needs at least 2 rows per class, the smallest class has {smallest}")
        return "split", 1
    return "loo", sum(counts.values())


def _dataset_folds(name: str, rows: list[int], gold: list[str], method: str, k: int, train_fraction: float,
                   seed: int) -> list[Fold]:
    from sklearn.model_selection import LeaveOneOut, StratifiedKFold, train_test_split

    idx = np.asarray(rows)
    if method == "all":
        return [Fold(name, 0, (), tuple(sorted(rows)))]
    if method == "split":
        n_classes = len(set(gold))
        n_test = max(n_classes, round(len(rows) * (1 - train_fraction)))
        n_test = min(n_test, len(rows) - n_classes)
        if n_test < n_classes:
            raise ProtocolError(f"dataset {name!r}: {len(rows)} rows cannot give every class a training and a test row")
        train, test = train_test_split(idx, test_size=n_test, stratify=gold, random_state=seed)
        return [Fold(name, 0, tuple(sorted(train.tolist())), tuple(sorted(test.tolist())))]
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed) if method == "kfold" else LeaveOneOut()
    return [Fold(name, j, tuple(sorted(idx[tr].tolist())), tuple(sorted(idx[te].tolist())))
            for j, (tr, te) in enumerate(splitter.split(idx.reshape(-1, 1), gold))]


def make_plan(examples: Sequence[Example], protocol: str = "auto", train_fraction: float = DEFAULT_TRAIN_FRACTION,
              seed: int = 0, folds: int = DEFAULT_FOLDS,
              min_class_for_split: int | None = DEFAULT_MIN_CLASS_FOR_SPLIT,
              loo_max_n: int = DEFAULT_LOO_MAX_N) -> Plan:
    """Folds for every dataset of ``examples`` (see the module docstring); checked with `Plan.check`.

    ``train_fraction`` is in (0, 1) (split only); ``folds`` >= 2 (kfold only).
    Classes are the rows' gold label strings. Raises ``ProtocolError`` on a
    bad setting or a dataset the chosen method cannot split.
    """
    if protocol not in PROTOCOLS:
        raise ProtocolError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not 0 < train_fraction < 1:
        raise ProtocolError(f"train fraction must be in (0, 1), got {train_fraction}")
    if folds < 2:
        raise ProtocolError(f"folds must be >= 2, got {folds}")
    by_dataset: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        by_dataset.setdefault(e.dataset, []).append(i)
    settings = {"protocol": protocol, "train_fraction": train_fraction, "seed": seed, "folds": folds,
                "min_class_for_split": min_class_for_split}
    if loo_max_n:  # recorded only when set, so reports of the default settings compare equal (validate.py gate)
        settings["loo_max_n"] = loo_max_n
    plan = Plan([], settings=settings)
    for name, rows in by_dataset.items():
        gold = [examples[i].labels[examples[i].label] for i in rows]
        try:
            method, k = _method(Counter(gold), protocol, folds, min_class_for_split, loo_max_n)
        except ProtocolError as exc:
            raise ProtocolError(f"dataset {name!r}: {exc}") from exc
        dataset_folds = _dataset_folds(name, rows, gold, method, k, train_fraction, seed)
        plan.folds.extend(dataset_folds)
        plan.methods[name] = {"method": method, "folds": len(dataset_folds), "n": len(rows),
                              "n_test": sum(len(f.test) for f in dataset_folds),
                              "train_per_fold": round(float(np.mean([len(f.train) for f in dataset_folds])), 1)}
    plan.check()
    return plan


def describe(plan: Plan) -> str:
    """One sentence stating the protocol, for tables and the README."""
    s = plan.settings
    counts = Counter(m["method"] for m in plan.methods.values())
    parts = []
    if counts.get("split"):
        parts.append(f"{counts['split']} dataset(s) by one stratified split ({s['train_fraction']:.0%} train)")
    if counts.get("kfold"):
        parts.append(f"{counts['kfold']} by stratified k-fold (k = min({s['folds']}, smallest class))")
    if counts.get("loo"):
        parts.append(f"{counts['loo']} by leave-one-out")
    if counts.get("all"):
        parts.append(f"{counts['all']} with every row a test row (zero-shot arms only, nothing fitted)")
    return (f"protocol {s['protocol']} (seed {s['seed']}): " + "; ".join(parts) +
            f"; {len(plan.test_rows)} test rows, the same for every arm; no arm is fitted on a row it is scored on")
