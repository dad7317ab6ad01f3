"""Out-of-fold choice of the per-group scoring, the confidence calibrator and the label cascade.

Inputs are cached dev sets (`zsnli.selection.score_cache`); everything is scored with the served code
(`zsnli.request_scoring`, `zsnli.scoring`). The unit of every figure is the normalised calibrated macro-F1
(`zsnli.metrics`), and datasets are weighted **by task kind as the benchmark is** (`kind_weights`): a
kind's weight is its share of the benchmark's datasets, split evenly over the dev sets of that kind;
kinds the benchmark does not have weigh 0 in the objective and are reported beside it.

The family (`Spec`, `GroupChoice`): an embedding weight w from `search.EMBEDDING_WEIGHTS` with the
entailment rule (`group_candidates`), pooled or per request group (`zsnli.request_scoring.GROUPS`; a group
with fewer than `MIN_GROUP_SETS` datasets in the fold takes the pooled choice), its temperature fitted by
NLL or on the objective itself (`fit_temperature_on_objective`), pooled or per group. On top, the confidence calibrator
(`zsnli.request_scoring.Calibrator`, `fit_calibrator`) is fitted on every fold dataset, by NLL or by the
top-label binary cross-entropy (Top-versus-All, Le Coz et al., NeurIPS 2024).

Leave-one-dataset-out (`leave_one_out`): for each held-out dev set h, every arm (`Spec`) is fitted on
the other sets only (`fold_scoring`), then h is scored with the served code (`served_figures`).
Leave-one-kind-out (`leave_out` over `kind_folds`): every set of one task kind held out at once, the arm
fitted on the other kinds, as the benchmark's new datasets and unfamiliar mix are met.
`fold_scoring` on every set makes the shipped choice.

Imports: numpy, scipy, ``zsnli.metrics``, ``zsnli.scoring``, ``zsnli.request_scoring``,
``zsnli.selection.search`` (packing, the NLL temperature fit, the fast figures), ``zsnli.selection.score_cache``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import metrics
from ..request_scoring import (CALIBRATOR_FEATURES, LOG_T_RANGE, GROUPS, Calibrator, Cascade, RequestScoring,
                               cascade_scores, prunes, request_group)
from ..scoring import ScoringConfig, scores_from_logits
from . import search as sel
from .score_cache import CONTENT_FREE_PREMISE, CachedSet

MIN_GROUP_SETS = 2
"""A group needs this many datasets in the fold for its own choice; otherwise it takes the pooled one."""
CALIBRATOR_RIDGE = 1e-3
"""L2 penalty on the calibrator's non-bias coefficients (per unit of the weighted mean loss)."""
CALIBRATOR_FITS = ("nll", "top_label")


# --------------------------------------------------------------------------- kinds and weights


def read_kinds(path: str | Path) -> dict[str, Any]:
    """``benchmark_kinds.json``: ``{"benchmark": {name: {"kind", "labels"}}, "zsc_dev": {name: kind}}``.

    Raises ``ValueError`` (one line) when the file is unreadable or lacks either object."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the task kinds file {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmark"), dict) or not isinstance(doc.get("zsc_dev"), dict):
        raise ValueError(f"{path}: expected 'benchmark' and 'zsc_dev' objects")
    return doc


def kind_weights(names: Sequence[str], kinds: Mapping[str, Any]) -> dict[str, float]:
    """Weight of each dev set: share(kind) / (dev sets of that kind among ``names``); sums to 1 over the
    kinds both sides have. share(kind) = benchmark datasets of that kind / all benchmark datasets
    (renormalised over the kinds present among ``names``). A set whose kind the benchmark lacks weighs 0.
    Raises ``ValueError`` for a name missing from ``kinds["zsc_dev"]``."""
    dev = kinds["zsc_dev"]
    missing = [n for n in names if n not in dev]
    if missing:
        raise ValueError(f"no task kind for {missing} in the kinds file")
    bench = [v["kind"] for v in kinds["benchmark"].values()]
    present = {dev[n] for n in names}
    share = {k: bench.count(k) for k in present}
    total = sum(share.values())
    if total == 0:
        return {n: 0.0 for n in names}
    count = {k: sum(1 for n in names if dev[n] == k) for k in present}
    return {n: share[dev[n]] / total / count[dev[n]] for n in names}


def weighted_mean(values: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """sum(w x v) / sum(w) over the keys of ``values`` (NaN when their weights sum to 0)."""
    w = np.array([weights[n] for n in values])
    v = np.array([values[n] for n in values])
    return float(w @ v / w.sum()) if w.sum() > 0 else float("nan")


# --------------------------------------------------------------------------- one dataset under one candidate


@dataclass(frozen=True)
class GroupCandidate:
    """A rule and an embedding weight for one group (its temperature is fitted)."""

    rule: str
    embedding_weight: float
    content_free_premise = None  # none is chosen here; `zsnli.request_scoring.prunes` reads it as of a config

    @property
    def label(self) -> str:
        return f"{self.rule}+w{self.embedding_weight:g}"


def group_candidates(weights: Sequence[float] = sel.EMBEDDING_WEIGHTS,
                     rules: Sequence[str] = ("entailment",)) -> list[GroupCandidate]:
    """Every rule x embedding weight (1 x 10 = 10 by default: every earlier selection chose the entailment
    rule, `zsnli.selection.search` tries all three)."""
    return [GroupCandidate(r, float(w)) for r in rules for w in weights]


@dataclass
class Scored:
    """One dataset under one candidate: packed combined scores and the calibrator's static features.

    packed: `search.Packed` of the combined scores; static: ``[N, F]`` features (all of `CALIBRATOR_FEATURES`)
    with the probability features (top1, margin, entropy) left 0 until `features` fills them at a base
    temperature; group: the dataset's request group; pairs_per_row: NLI pairs per row actually scored.
    """

    packed: sel.Packed
    static: np.ndarray
    group: str
    pairs_per_row: float

    def features(self, log_t_base: np.ndarray) -> np.ndarray:
        """``[N, F]`` features at per-row base temperatures exp(log_t_base), exactly
        `zsnli.request_scoring.calibrator_features` of each row's scores / T_base."""
        probs = sel.softmax_rows(self.packed, np.exp(log_t_base))
        srt = np.sort(probs, axis=1)
        phi = self.static.copy()
        phi[:, _F["top1"]] = srt[:, -1]
        phi[:, _F["margin"]] = srt[:, -1] - srt[:, -2]
        plogp = np.where(probs > 0, probs * np.log(np.maximum(probs, 1e-300)), 0.0)
        phi[:, _F["entropy"]] = -plogp.sum(axis=1) / np.log(self.packed.k)
        return phi


_F = {name: i for i, name in enumerate(CALIBRATOR_FEATURES)}


def dataset_group(cs: CachedSet) -> str:
    """The request group of a dataset (all its rows share their hypotheses' group). Raises ``ValueError``
    when rows fall in different groups (a mixed set cannot be chosen for as one)."""
    off = cs.offsets
    groups = {request_group([cs.hypotheses[j] for j in cs.hyp_index[a:b]]) for a, b in zip(off[:-1], off[1:])}
    if len(groups) != 1 or None in groups:
        raise ValueError(f"{cs.name}: rows fall in groups {sorted(map(str, groups))}")
    return groups.pop()


def score_dataset(cs: CachedSet, cand: GroupCandidate, cascade: Cascade | None = None) -> Scored:
    """`Scored` of ``cs`` under ``cand``: combined score ``rule(logits) + w x cos`` per pair, exactly the
    served formula; with ``cascade``, the rows it prunes (`zsnli.request_scoring.prunes`, the server's rule)
    keep only their top-``keep`` cosines' NLI scores (`zsnli.request_scoring.cascade_scores`)."""
    nli = scores_from_logits(cs.logits, cand.rule, cs.entail_idx, cs.contra_idx)
    cos = cs.cosine.astype(np.float64)
    off = cs.offsets
    pairs = cs.k.astype(np.float64).copy()
    if cascade is not None:
        nli = nli.copy()
        for i, (a, b) in enumerate(zip(off[:-1], off[1:])):
            if prunes(cascade, cand, len(set(cs.hyp_index[a:b]))):
                kept = cascade.kept(cos[a:b])
                nli[a:b] = cascade_scores(nli[a:b][kept], kept, b - a)
                pairs[i] = cascade.keep
    s = nli + cand.embedding_weight * cos
    group = dataset_group(cs)
    tokens = cs.premise_tokens if cs.premise_tokens is not None else np.zeros(len(cs), dtype=np.int64)
    static = np.zeros((len(cs), len(CALIBRATOR_FEATURES)))
    static[:, _F["bias"]] = 1.0
    static[:, _F["log_k"]] = np.log(cs.k)
    for g in ("negation", "binary", "many"):
        static[:, _F[g]] = float(group == g)
    if cand.embedding_weight:
        nli_p, cos_p = sel.pad_flat(cs, nli), sel.pad_flat(cs, cos)
        mask = np.arange(nli_p.shape[1])[None, :] < cs.k[:, None]
        static[:, _F["agree"]] = (np.where(mask, nli_p, -np.inf).argmax(axis=1)
                                  == np.where(mask, cos_p, -np.inf).argmax(axis=1)).astype(np.float64)
    static[:, _F["log_tokens"]] = np.log1p(np.maximum(tokens, 0))
    return Scored(sel.pack(cs, s), static, group, float(pairs.mean()))


# --------------------------------------------------------------------------- temperature fits


def _row_weights(scored: Sequence[Scored], weights: Sequence[float]) -> np.ndarray:
    """Row weights ``[R]``: each dataset's weight spread evenly over its rows (the total is sum(weights))."""
    return np.concatenate([np.full(len(s.packed.k), w / len(s.packed.k)) for s, w in zip(scored, weights)])


def fit_group_temperature(scored: Sequence[Scored], weights: Sequence[float]) -> tuple[float, float]:
    """``(t0, b)`` of T(K) = t0 x K^b by weighted NLL (`search.fit_temperature`); b = 0 when every row has
    the same K (a two-label group)."""
    joined, _ = sel.stack([s.packed for s in scored])
    w = _row_weights(scored, weights)
    form = "global" if np.unique(joined.k[w > 0]).size <= 1 else "t0*K^b"
    return sel.fit_temperature(joined, w / w.sum(), form)


def _loss_and_grad(p: sel.Packed, phi: np.ndarray, w: np.ndarray, log_t_base: np.ndarray, theta: np.ndarray,
                   how: str) -> tuple[float, np.ndarray]:
    """Weighted loss of per-row temperatures T_base x exp(phi . theta) and its gradient in theta.

    nll: -log p_gold; d/dlogT = z_gold - E_p[z]. top_label: binary cross-entropy of the top-1 probability c
    against top-1 correctness y; dc/dlogT = -c (z_top - E_p[z]). The clip of `LOG_T_RANGE` is ignored in
    the gradient (the fit stays far inside it).
    """
    log_t = log_t_base + np.clip(phi @ theta, *LOG_T_RANGE)
    z = np.where(p.mask, p.scores / np.exp(log_t)[:, None], -np.inf)
    m = z.max(axis=1)
    e = np.where(p.mask, np.exp(z - m[:, None]), 0.0)
    total = e.sum(axis=1)
    probs = e / total[:, None]
    zz = np.where(p.mask, z, 0.0)
    ez = (probs * zz).sum(axis=1)
    rows = np.arange(len(m))
    if how == "nll":
        zg = zz[rows, p.gold]
        loss = (m + np.log(total)) - zg
        dlogt = zg - ez
    else:
        top = probs.argmax(axis=1)
        c = np.clip(probs[rows, top], 1e-12, 1 - 1e-12)
        y = (p.classes[rows, top] == p.gold_classes).astype(np.float64)
        loss = -(y * np.log(c) + (1 - y) * np.log(1 - c))
        dc = -c * (zz[rows, top] - ez)
        dlogt = (-(y / c) + (1 - y) / (1 - c)) * dc
    return float(w @ loss), phi.T @ (w * dlogt)


def fit_calibrator(scored: Sequence[Scored], weights: Sequence[float], log_t_base: Sequence[np.ndarray],
                   how: str = "nll", features: Sequence[str] = CALIBRATOR_FEATURES,
                   ridge: float = CALIBRATOR_RIDGE) -> Calibrator:
    """The `Calibrator` minimising the weighted mean loss over ``scored`` plus ``ridge`` x |theta|^2.

    weights: one per dataset (each dataset's rows share it evenly); log_t_base: per dataset, ``[N]`` log of
    the group temperature of each row (the calibrator's factor multiplies it). how: ``nll`` or ``top_label``
    (`_loss_and_grad`). BFGS from theta = 0 (the group temperatures unchanged). Raises ``ValueError`` on an
    unknown ``how``.
    """
    from scipy.optimize import minimize

    if how not in CALIBRATOR_FITS:
        raise ValueError(f"unknown calibrator fit {how!r}; expected one of {CALIBRATOR_FITS}")
    idx = [CALIBRATOR_FEATURES.index(f) for f in features]
    buckets = [(s.packed, s.features(lt)[:, idx], np.full(len(s.packed.k), wt / len(s.packed.k)), lt)
               for s, wt, lt in zip(scored, weights, log_t_base) if wt > 0]
    total = sum(float(b[2].sum()) for b in buckets)
    buckets = [(p, phi, w / total, lt) for p, phi, w, lt in buckets]

    def value_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        parts = [_loss_and_grad(p, phi, w, lt, theta, how) for p, phi, w, lt in buckets]
        return (sum(v for v, _ in parts) + ridge * float(theta @ theta),
                np.sum([g for _, g in parts], axis=0) + 2 * ridge * theta)

    res = minimize(value_grad, x0=np.zeros(len(idx)), jac=True, method="BFGS", options={"maxiter": 500})
    return Calibrator(tuple(features), tuple(round(float(c), 6) for c in res.x), how)


# --------------------------------------------------------------------------- figures


def dataset_figures(s: Scored, temps: np.ndarray, bounds: sel.Bounds) -> dict[str, float]:
    """``{"normalised", "ece", "macro_f1", "pairs_per_row"}`` of one scored dataset at per-row temperatures."""
    f1 = sel.fast_macro_f1(s.packed)
    norm, ece = sel.fast_normalised(s.packed, f1, temps, bounds)
    return {"normalised": norm, "ece": ece, "macro_f1": f1, "pairs_per_row": s.pairs_per_row}


def group_temperatures(s: Scored, t0: float, b: float) -> np.ndarray:
    """Per-row T(K) = t0 x K^b of a scored dataset."""
    return sel.row_temperatures(s.packed, math.log(t0), b)


def calibrated_temperatures(s: Scored, cal: Calibrator, t0: float, b: float) -> np.ndarray:
    """Per-row temperatures T(K) x the calibrator's factor (`RequestScoring.temperature`'s formula)."""
    log_base = np.log(group_temperatures(s, t0, b))
    return np.exp(log_base + cal.log_temperature(s.features(log_base)))


# --------------------------------------------------------------------------- the choice


@dataclass
class GroupChoice:
    """What one fold (or all data) chose: per group a candidate and its (t0, b); the pooled fallback."""

    per_group: dict[str, tuple[GroupCandidate, tuple[float, float], str]] = field(default_factory=dict)
    pooled: tuple[GroupCandidate, tuple[float, float]] | None = None

    def for_group(self, group: str) -> tuple[GroupCandidate, tuple[float, float]]:
        entry = self.per_group.get(group)
        return (entry[0], entry[1]) if entry is not None else self.pooled


class Selector:
    """Scores every (dataset, candidate) once and makes choices on any subset of datasets.

    sets: name -> `CachedSet`; weights: name -> kind weight (`kind_weights`); cascade: applied to every
    candidate's scores (None: exact scoring of every label).
    """

    def __init__(self, sets: Mapping[str, CachedSet], weights: Mapping[str, float],
                 cands: Sequence[GroupCandidate] | None = None, cascade: Cascade | None = None) -> None:
        self.sets, self.weights = dict(sets), dict(weights)
        self.cands = list(cands or group_candidates())
        self.cascade = cascade
        self.group = {n: dataset_group(cs) for n, cs in self.sets.items()}
        self.bounds = {n: sel.dataset_bounds(cs) for n, cs in self.sets.items()}
        self._scored: dict[tuple[str, int], Scored] = {}
        self._choices: dict[tuple, GroupChoice] = {}

    def scored(self, name: str, ci: int) -> Scored:
        key = (name, ci)
        if key not in self._scored:
            self._scored[key] = score_dataset(self.sets[name], self.cands[ci], self.cascade)
        return self._scored[key]

    def _objective(self, names: Sequence[str], ci: int, t_fit: str = "nll") -> tuple[float, tuple[float, float]]:
        scored = [self.scored(n, ci) for n in names]
        w = [max(self.weights[n], 1e-9) for n in names]  # weight-0 kinds still shape T a little
        if t_fit == "objective":
            t0, b = fit_temperature_on_objective(scored, w, [self.bounds[n] for n in names])
        else:
            t0, b = fit_group_temperature(scored, w)
        norms = {n: dataset_figures(s, group_temperatures(s, t0, b), self.bounds[n])["normalised"]
                 for n, s in zip(names, scored)}
        value = weighted_mean(norms, self.weights)
        if math.isnan(value):
            value = float(np.mean(list(norms.values())))
        return value, (t0, b)

    def best(self, names: Sequence[str], t_fit: str = "nll") -> tuple[GroupCandidate, tuple[float, float]]:
        """The candidate (and its T fitted by ``t_fit``) with the highest kind-weighted mean normalised on ``names``."""
        results = [self._objective(names, ci, t_fit) for ci in range(len(self.cands))]
        ci = int(np.argmax([v for v, _ in results]))
        return self.cands[ci], results[ci][1]

    def choose(self, names: Sequence[str], t_fit: str = "nll") -> GroupChoice:
        """Per-group choices on ``names`` (groups with < `MIN_GROUP_SETS` sets there: the pooled one)."""
        choice = GroupChoice(pooled=self.best(names, t_fit))
        for g in GROUPS:
            members = [n for n in names if self.group[n] == g]
            if len(members) >= MIN_GROUP_SETS:
                cand, temps = self.best(members, t_fit)
                choice.per_group[g] = (cand, temps, "own")
        return choice

    def choose_cached(self, names: Sequence[str], per_group: bool, t_fit: str = "nll") -> GroupChoice:
        """`choose` (``per_group``) or the pooled choice alone, memoised per set of names."""
        key = (tuple(sorted(names)), per_group, t_fit)
        if key not in self._choices:
            if per_group:
                self._choices[key] = self.choose(names, t_fit)
            else:
                self._choices[key] = GroupChoice(pooled=self.best(names, t_fit))
        return self._choices[key]

    def scored_under(self, name: str, choice: GroupChoice) -> tuple[Scored, tuple[float, float]]:
        cand, temps = choice.for_group(self.group[name])
        return self.scored(name, self.cands.index(cand)), temps

    def calibrator(self, names: Sequence[str], choice: GroupChoice, how: str,
                   features: Sequence[str] = CALIBRATOR_FEATURES, ridge: float = CALIBRATOR_RIDGE) -> Calibrator:
        """The calibrator fitted on ``names`` scored under ``choice`` (on top of its group temperatures)."""
        pairs = [self.scored_under(n, choice) for n in names]
        log_base = [np.log(group_temperatures(s, *t)) for s, t in pairs]
        return fit_calibrator([s for s, _ in pairs], [self.weights[n] for n in names], log_base, how, features, ridge)


@dataclass(frozen=True)
class Spec:
    """One arm of the choice: how w is chosen (``pooled``: one candidate for every group, ``groups``: each
    group's own), how temperatures are fitted (``nll`` or ``objective``: `fit_temperature_on_objective`),
    whether each group gets its own T(K) (``group_t``; pooled for a group with < `MIN_GROUP_SETS` sets),
    the calibrator on top (``(fit, ridge)`` or None) and the cascade (None: every label scored)."""

    w_choice: str = "pooled"
    t_fit: str = "nll"
    group_t: bool = False
    calibrator: tuple[str, float] | None = None

    @property
    def label(self) -> str:
        cal = f" + calibrator {self.calibrator[0]}/{self.calibrator[1]:g}" if self.calibrator else ""
        return f"w {self.w_choice}, T {'per group' if self.group_t else 'pooled'} by {self.t_fit}{cal}"


SPECS = (Spec(), Spec(t_fit="objective"), Spec(t_fit="objective", group_t=True),
         Spec(t_fit="objective", calibrator=("nll", 1e-2)), Spec(t_fit="objective", calibrator=("top_label", 1e-2)))
"""The arms compared out of fold (5; with 10 candidates for w each: 50 fitted configurations per fold)."""


def fold_scoring(selector: "Selector", train: Sequence[str], spec: Spec, embedding_sha256: str | None) -> RequestScoring:
    """The `RequestScoring` that ``spec`` fits on the datasets ``train`` (served as is)."""
    choice = selector.choose_cached(train, spec.w_choice == "groups", spec.t_fit)
    scored = {n: selector.scored_under(n, choice)[0] for n in train}

    def fit(names: Sequence[str]) -> tuple[float, float]:
        sc, wts = [scored[n] for n in names], [max(selector.weights[n], 1e-9) for n in names]
        if spec.t_fit == "objective":
            return fit_temperature_on_objective(sc, wts, [selector.bounds[n] for n in names])
        return fit_group_temperature(sc, wts)

    pooled_t = fit(train)

    def config(cand: GroupCandidate, temps: tuple[float, float]) -> ScoringConfig:
        w = float(cand.embedding_weight)
        return ScoringConfig(rule=cand.rule, temperature=round(float(temps[0]), 6), k_exponent=round(float(temps[1]), 6),
                             embedding_weight=w, embedding_sha256=embedding_sha256 if w else None)

    groups = {}
    for g in GROUPS:
        members = [n for n in train if selector.group[n] == g]
        own_t = spec.group_t and len(members) >= MIN_GROUP_SETS
        own_w = g in choice.per_group
        if own_t or own_w:
            groups[g] = config(choice.for_group(g)[0], fit(members) if own_t else pooled_t)
    default = config(choice.pooled[0], pooled_t)
    has_cosine = any(c.embedding_weight != 0 for c in [default, *groups.values()])
    cascade = selector.cascade if has_cosine else None  # nothing ranks the labels without a cosine term
    scoring = RequestScoring(default, groups, None, cascade)
    if spec.calibrator is None:
        return scoring
    log_base = [np.log(group_temperatures(scored[n], *_temps(scoring.config_for(selector.group[n])))) for n in train]
    aligned = [objective_weight(scored[n], lb, selector.weights[n], selector.bounds[n]) for n, lb in zip(train, log_base)]
    cal = fit_calibrator([scored[n] for n in train], aligned, log_base, spec.calibrator[0], CALIBRATOR_FEATURES,
                         spec.calibrator[1])
    return RequestScoring(scoring.default, scoring.groups, cal, cascade)


def objective_weight(s: Scored, log_t_base: np.ndarray, weight: float, bounds: sel.Bounds) -> float:
    """A dataset's weight in the calibrator's loss, aligned with the objective: d normalised / d ECE is
    -100 x macro-F1 / (ceiling - floor) while the score is above the floor and 0 once it is clamped there,
    so ``weight`` x macro-F1 / (ceiling - floor), and 0 for a dataset at the floor (nothing a temperature
    does can lift it, and its confidently wrong rows would otherwise dominate the fit)."""
    if not bounds.ceiling > bounds.floor:
        return 0.0
    f1 = sel.fast_macro_f1(s.packed)
    norm, _ = sel.fast_normalised(s.packed, f1, np.exp(log_t_base), bounds)
    return float(weight * f1 / (bounds.ceiling - bounds.floor)) if norm > 0 else 0.0


def _temps(config: ScoringConfig) -> tuple[float, float]:
    return config.temperature, config.k_exponent


def dataset_folds(names: Sequence[str]) -> dict[str, list[str]]:
    """Leave-one-dataset-out: one fold per name, holding out that name alone (``{name: [name]}``)."""
    return {n: [n] for n in names}


def kind_folds(names: Sequence[str], kind_of: Mapping[str, str]) -> dict[str, list[str]]:
    """Leave-one-kind-out: one fold per task kind, holding out every set of that kind at once (``{kind: [names]}``).

    The benchmark's datasets are new to the choice and its mix of kinds is not ours, so a choice is also judged
    with a whole kind unseen (issue 42). Raises ``KeyError`` for a name missing from ``kind_of``.
    """
    folds: dict[str, list[str]] = {}
    for n in names:
        folds.setdefault(kind_of[n], []).append(n)
    return folds


def leave_out(selector: "Selector", folds: Mapping[str, Sequence[str]], specs: Sequence[Spec] = SPECS,
              embedding_sha256: str | None = "offline", log: Callable[[str], None] | None = None
              ) -> dict[str, dict[str, dict[str, float]]]:
    """Out-of-fold figures of each arm: for each fold, every arm fitted on the sets outside it and scored on each
    set inside it, every figure from the served code (`served_figures`).

    folds: fold name -> held-out set names (`dataset_folds`, `kind_folds`; every set in exactly one fold).
    Returns ``{spec.label: {held-out name: figures}}`` and, under ``"_scoring"``, the served scoring each held-out
    set was scored with. Raises ``ValueError`` when a fold holds out every set (nothing left to fit on).
    """
    names = list(selector.sets)
    out: dict[str, Any] = {spec.label: {} for spec in specs}
    out["_scoring"] = {spec.label: {} for spec in specs}
    for fold, held in folds.items():
        train = [n for n in names if n not in set(held)]
        if not train:
            raise ValueError(f"fold {fold!r} holds out every set: nothing left to choose on")
        for spec in specs:
            scoring = fold_scoring(selector, train, spec, embedding_sha256)
            for h in held:
                out[spec.label][h] = served_figures({h: selector.sets[h]}, scoring)[h]
                out["_scoring"][spec.label][h] = scoring
        if log is not None:
            log(f"held out {fold}: " + ", ".join(
                f"{np.mean([out[sp.label][h]['normalised'] for h in held]):.1f}" for sp in specs))
    return out


def leave_one_out(selector: "Selector", specs: Sequence[Spec] = SPECS, embedding_sha256: str | None = "offline",
                  log: Callable[[str], None] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """`leave_out` with one fold per dataset (`dataset_folds`): ``{spec.label: {held-out name: figures}}`` and
    ``"_scoring"``."""
    return leave_out(selector, dataset_folds(list(selector.sets)), specs, embedding_sha256, log)


def fixed_figures(sets: Mapping[str, CachedSet], config: ScoringConfig) -> dict[str, dict[str, float]]:
    """Figures of one fixed `ScoringConfig` (e.g. today's shipped one, or plain entailment at T = 1) on every
    set, with the served code (`search.served_probabilities`, `metrics.score_rows`)."""
    out = {}
    for n, cs in sets.items():
        card = sel.score_cached(cs, sel.served_probabilities(cs, config))
        out[n] = {"normalised": card.normalised, "ece": card.ece, "macro_f1": card.macro_f1,
                  "pairs_per_row": float(cs.k.mean())}
    return out


def summary(per_set: Mapping[str, Mapping[str, float]], weights: Mapping[str, float],
            kinds: Mapping[str, str]) -> dict[str, Any]:
    """Kind-weighted and unweighted means of normalised and ECE, the mean normalised per kind, pairs per row."""
    norms = {n: f["normalised"] for n, f in per_set.items()}
    eces = {n: f["ece"] for n, f in per_set.items()}
    by_kind: dict[str, list[float]] = {}
    for n, v in norms.items():
        by_kind.setdefault(kinds[n], []).append(v)
    return {"weighted_normalised": weighted_mean(norms, weights), "unweighted_normalised": float(np.mean(list(norms.values()))),
            "weighted_ece": weighted_mean(eces, weights), "unweighted_ece": float(np.mean(list(eces.values()))),
            "per_kind": {k: float(np.mean(v)) for k, v in sorted(by_kind.items())},
            "pairs_per_row": weighted_mean({n: f["pairs_per_row"] for n, f in per_set.items()}, weights)}


def served_probabilities(cs: CachedSet, scoring: RequestScoring) -> tuple[list[np.ndarray], int]:
    """Each row's probabilities under ``scoring`` through the served code path (`RequestScoring.probabilities`,
    its group's rule and cosine term, the cascade's kept labels and filled scores, the content-free correction
    from the cached ``cf_logits``), and the NLI pairs scored. Raises ``ValueError`` when the scoring's
    content-free premise is not the cached one (`zsnli.selection.score_cache.CONTENT_FREE_PREMISE`)."""
    off = cs.offsets
    tokens = cs.premise_tokens if cs.premise_tokens is not None else np.zeros(len(cs), dtype=np.int64)
    probs, pairs = [], 0
    for i, (a, b) in enumerate(zip(off[:-1], off[1:])):
        hyps = [cs.hypotheses[j] for j in cs.hyp_index[a:b]]
        config = scoring.config_for(request_group(hyps))
        nli = scores_from_logits(cs.logits[a:b], config.rule, cs.entail_idx, cs.contra_idx)
        cos = cs.cosine[a:b].astype(np.float64)
        if prunes(scoring.cascade, config, len(set(hyps))):
            kept = scoring.cascade.kept(cos)
            nli = cascade_scores(nli[kept], kept, b - a)
            pairs += scoring.cascade.keep
        else:
            pairs += b - a
        cf = None
        if config.content_free_premise is not None:
            if config.content_free_premise != CONTENT_FREE_PREMISE:
                raise ValueError(f"{cs.name}: the cache holds the content-free premise {CONTENT_FREE_PREMISE!r}, "
                                 f"not {config.content_free_premise!r}")
            cf = scores_from_logits(cs.cf_logits[a:b], config.rule, cs.entail_idx, cs.contra_idx)
        probs.append(scoring.probabilities(nli, hyps, cos if config.embedding_weight else None, cf,
                                           premise_tokens=int(tokens[i])))
    return probs, pairs


def served_figures(sets: Mapping[str, CachedSet], scoring: RequestScoring) -> dict[str, dict[str, float]]:
    """Figures of ``scoring`` on every set with the served code path (`served_probabilities`, then
    `metrics.score_rows`): the check that what ships scores what was chosen."""
    out = {}
    for n, cs in sets.items():
        probs, pairs = served_probabilities(cs, scoring)
        card = sel.score_cached(cs, probs)
        out[n] = {"n": card.n, "n_classes": card.n_classes, "macro_f1": card.macro_f1, "ece": card.ece,
                  "calibrated_macro_f1": card.calibrated_macro_f1, "normalised": card.normalised,
                  "pairs_per_row": pairs / len(cs)}
    return out


# --------------------------------------------------------------------------- temperatures fitted on the objective

LOG_T0_GRID = np.linspace(-3.0, 3.0, 61)
"""log t0 grid of `fit_temperature_on_objective` (T from 0.05 to 20, steps of 10 %)."""
B_GRID = np.linspace(-0.75, 0.25, 9)
"""K-exponent grid of `fit_temperature_on_objective` (used only where K varies)."""


def _top_confidences(p: sel.Packed, temps: np.ndarray) -> np.ndarray:
    """``[G, N]`` top-1 probabilities of every row at each of G per-row temperatures ``temps`` ``[G, N]``
    (1 / sum_j exp((s_j - s_max) / T): the top label does not depend on T)."""
    s = np.where(p.mask, p.scores, -np.inf)
    d = (s - s.max(axis=1, keepdims=True)).astype(np.float32)  # [N, K], 0 at the top, -inf padding
    out = np.empty(temps.shape, dtype=np.float64)
    for g in range(temps.shape[0]):
        out[g] = 1.0 / np.exp(d / temps[g][:, None].astype(np.float32)).sum(axis=1)
    return out


def _ece_rows(conf: np.ndarray, correct: np.ndarray, n_bins: int = metrics.N_BINS) -> np.ndarray:
    """ECE (`zsnli.metrics.expected_calibration_error`'s bins) of each row of ``conf`` ``[G, N]``."""
    g, n = conf.shape
    idx = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1) + np.arange(g)[:, None] * n_bins
    gap = np.bincount(idx.ravel(), weights=(conf - correct[None, :]).ravel(), minlength=g * n_bins)
    return np.abs(gap.reshape(g, n_bins)).sum(axis=1) / n


def fit_temperature_on_objective(scored: Sequence[Scored], weights: Sequence[float],
                                 bounds: Sequence[sel.Bounds]) -> tuple[float, float]:
    """``(t0, b)`` of T(K) = t0 x K^b maximising the weighted mean normalised calibrated macro-F1 itself
    over ``scored`` (grid `LOG_T0_GRID` x `B_GRID`; b = 0 where every row has one K).

    Since a temperature never changes the arg-max, macro-F1 is fixed and only ECE moves, so this is the
    temperature with the lowest ECE weighted by each dataset's F1 and range; a dataset at the floor under
    every temperature (normalised clamped to 0) does not pull it, unlike NLL, which a confidently wrong
    dataset dominates.
    """
    one_k = all(np.unique(s.packed.k).size == 1 for s in scored) and len({float(s.packed.k[0]) for s in scored}) == 1
    grid = [(lt, 0.0) for lt in LOG_T0_GRID] if one_k else [(lt, b) for lt in LOG_T0_GRID for b in B_GRID]
    total = np.zeros(len(grid))
    wsum = float(sum(weights)) or 1.0
    for s, w, bd in zip(scored, weights, bounds):
        if w <= 0 or not bd.ceiling > bd.floor:
            continue
        p = s.packed
        f1 = sel.fast_macro_f1(p)
        pred = np.where(p.mask, p.scores, -np.inf).argmax(axis=1)
        correct = (p.classes[np.arange(len(pred)), pred] == p.gold_classes).astype(np.float64)
        temps = np.exp(np.array([lt for lt, _ in grid])[:, None] + np.array([b for _, b in grid])[:, None]
                       * np.log(p.k)[None, :])
        ece = _ece_rows(_top_confidences(p, temps), correct)
        norm = np.clip((f1 * (1 - ece) - bd.floor) / (bd.ceiling - bd.floor), 0.0, 1.0) * 100.0
        total += w / wsum * norm
    lt, b = grid[int(np.argmax(total))]
    return float(math.exp(lt)), float(b)
