"""Out-of-fold choice of the per-group scoring, the confidence calibrator and the label cascade.

Inputs are cached dev sets (`zsnli.selection.score_cache`); everything is scored with the served code
(`zsnli.request_scoring`, `zsnli.scoring`). The unit of every figure is the normalised calibrated macro-F1
(`zsnli.metrics`), and datasets are weighted **by task kind as the benchmark is** (`kind_weights`): a
kind's weight is its share of the benchmark's datasets, split evenly over the dev sets of that kind;
kinds the benchmark does not have weigh 0 in the objective and are reported beside it.

The family (`GroupChoice`): for each request group (`zsnli.request_scoring.GROUPS`), a rule
(`zsnli.scoring.RULES`) and an embedding weight w from `search.EMBEDDING_WEIGHTS` (3 x 10 = 30 candidates
per group), each with its temperature fitted by NLL on the group's datasets (one T for two-label groups,
t0 x K^b otherwise); a group with fewer than `MIN_GROUP_SETS` datasets in the fold takes the pooled choice
(one candidate chosen on all the fold's datasets). On top, the confidence calibrator
(`zsnli.request_scoring.Calibrator`, `fit_calibrator`) is fitted on every fold dataset, by NLL or by the
top-label binary cross-entropy (Top-versus-All, Le Coz et al., NeurIPS 2024).

Leave-one-dataset-out (`leave_one_out`): for each held-out dev set h, the groups' choices and the
calibrator are fitted on the other sets only, then h is scored with them. `choose_on_all` makes the
shipped choice on every set.

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
                               calibrator_features, cascade_scores, request_group)
from ..scoring import RULES, ScoringConfig, scores_from_logits
from . import search as sel
from .score_cache import CachedSet

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
    if not isinstance(doc.get("benchmark"), dict) or not isinstance(doc.get("zsc_dev"), dict):
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

    @property
    def label(self) -> str:
        return f"{self.rule}+w{self.embedding_weight:g}"


def group_candidates(weights: Sequence[float] = sel.EMBEDDING_WEIGHTS) -> list[GroupCandidate]:
    """Every rule x embedding weight (3 x 10 = 30 by default)."""
    return [GroupCandidate(r, float(w)) for r in RULES for w in weights]


@dataclass
class Scored:
    """One dataset under one candidate: packed combined scores and the calibrator's features.

    packed: `search.Packed` of the combined scores; phi: ``[N, F]`` features (all of `CALIBRATOR_FEATURES`);
    group: the dataset's request group; cascade_pairs: NLI pairs per row actually scored.
    """

    packed: sel.Packed
    phi: np.ndarray
    group: str
    pairs_per_row: float


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
    served formula; with ``cascade``, rows with K >= min_labels keep only their top-``keep`` cosines'
    NLI scores (`zsnli.request_scoring.cascade_scores`)."""
    nli = scores_from_logits(cs.logits, cand.rule, cs.entail_idx, cs.contra_idx)
    cos = cs.cosine.astype(np.float64)
    off = cs.offsets
    pairs = cs.k.astype(np.float64).copy()
    if cascade is not None:
        nli = nli.copy()
        for i, (a, b) in enumerate(zip(off[:-1], off[1:])):
            if cascade.applies(b - a):
                kept = cascade.kept(cos[a:b])
                nli[a:b] = cascade_scores(nli[a:b][kept], kept, b - a)
                pairs[i] = cascade.keep
    s = nli + cand.embedding_weight * cos
    group = dataset_group(cs)
    tokens = cs.premise_tokens if cs.premise_tokens is not None else np.zeros(len(cs), dtype=np.int64)
    phi = np.stack([calibrator_features(s[a:b], nli[a:b], cos[a:b] if cand.embedding_weight else None, group,
                                        int(tokens[i])) for i, (a, b) in enumerate(zip(off[:-1], off[1:]))])
    return Scored(sel.pack(cs, s), phi, group, float(pairs.mean()))


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


def _loss_and_grad(p: sel.Packed, phi: np.ndarray, w: np.ndarray, theta: np.ndarray, how: str,
                   ridge: float) -> tuple[float, np.ndarray]:
    """Weighted mean loss of per-row temperatures exp(phi . theta) and its gradient in theta.

    nll: -log p_gold; d/dlogT = z_gold - E_p[z]. top_label: binary cross-entropy of the top-1 probability c
    against top-1 correctness y; dc/dlogT = -c (z_top - E_p[z]).
    """
    log_t = np.clip(phi @ theta, *LOG_T_RANGE)
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
    reg = ridge * float(theta[1:] @ theta[1:])
    grad = phi.T @ (w * dlogt) + 2 * ridge * np.concatenate([[0.0], theta[1:]])
    return float(w @ loss) + reg, grad


def fit_calibrator(scored: Sequence[Scored], weights: Sequence[float], how: str = "nll",
                   features: Sequence[str] = CALIBRATOR_FEATURES, ridge: float = CALIBRATOR_RIDGE) -> Calibrator:
    """The `Calibrator` minimising the weighted mean loss over ``scored`` (dataset weights ``weights``).

    how: ``nll`` or ``top_label`` (`_loss_and_grad`); features must start with ``bias``. BFGS from the
    bias at log of the median row's fitted global temperature. Raises ``ValueError`` on an unknown ``how``
    or when ``bias`` is not the first feature.
    """
    from scipy.optimize import minimize

    if how not in CALIBRATOR_FITS:
        raise ValueError(f"unknown calibrator fit {how!r}; expected one of {CALIBRATOR_FITS}")
    if list(features)[:1] != ["bias"]:
        raise ValueError("the calibrator's first feature must be 'bias'")
    idx = [CALIBRATOR_FEATURES.index(f) for f in features]
    buckets = []
    for s, wt in zip(scored, weights):
        if wt > 0:
            buckets.append((s.packed, s.phi[:, idx], np.full(len(s.packed.k), wt / len(s.packed.k))))
    total = sum(float(b[2].sum()) for b in buckets)
    buckets = [(p, phi, w / total) for p, phi, w in buckets]

    def value_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        parts = [_loss_and_grad(p, phi, w, theta, how, 0.0) for p, phi, w in buckets]
        reg = ridge * float(theta[1:] @ theta[1:])
        grad = np.sum([g for _, g in parts], axis=0) + 2 * ridge * np.concatenate([[0.0], theta[1:]])
        return sum(v for v, _ in parts) + reg, grad

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


def calibrated_temperatures(s: Scored, cal: Calibrator) -> np.ndarray:
    """Per-row temperatures of the calibrator."""
    return np.exp(cal.log_temperature(s.phi))


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

    def scored(self, name: str, ci: int) -> Scored:
        key = (name, ci)
        if key not in self._scored:
            self._scored[key] = score_dataset(self.sets[name], self.cands[ci], self.cascade)
        return self._scored[key]

    def _objective(self, names: Sequence[str], ci: int) -> tuple[float, tuple[float, float]]:
        scored = [self.scored(n, ci) for n in names]
        w = [max(self.weights[n], 1e-9) for n in names]  # weight-0 kinds still shape T a little
        t0, b = fit_group_temperature(scored, w)
        norms = {n: dataset_figures(s, group_temperatures(s, t0, b), self.bounds[n])["normalised"]
                 for n, s in zip(names, scored)}
        value = weighted_mean(norms, self.weights)
        if math.isnan(value):
            value = float(np.mean(list(norms.values())))
        return value, (t0, b)

    def best(self, names: Sequence[str]) -> tuple[GroupCandidate, tuple[float, float]]:
        """The candidate (and its fitted T) with the highest kind-weighted mean normalised on ``names``."""
        results = [self._objective(names, ci) for ci in range(len(self.cands))]
        ci = int(np.argmax([v for v, _ in results]))
        return self.cands[ci], results[ci][1]

    def choose(self, names: Sequence[str]) -> GroupChoice:
        """Per-group choices on ``names`` (groups with < `MIN_GROUP_SETS` sets there: the pooled one)."""
        choice = GroupChoice(pooled=self.best(names))
        for g in GROUPS:
            members = [n for n in names if self.group[n] == g]
            if len(members) >= MIN_GROUP_SETS:
                cand, temps = self.best(members)
                choice.per_group[g] = (cand, temps, "own")
        return choice

    def scored_under(self, name: str, choice: GroupChoice) -> tuple[Scored, tuple[float, float]]:
        cand, temps = choice.for_group(self.group[name])
        return self.scored(name, self.cands.index(cand)), temps

    def calibrator(self, names: Sequence[str], choice: GroupChoice, how: str,
                   features: Sequence[str] = CALIBRATOR_FEATURES) -> Calibrator:
        """The calibrator fitted on ``names`` scored under ``choice``."""
        scored = [self.scored_under(n, choice)[0] for n in names]
        return fit_calibrator(scored, [self.weights[n] for n in names], how, features)


ARMS = ("pooled T(K)", "groups T(K)", "groups + calibrator (nll)", "groups + calibrator (top_label)")


def leave_one_out(selector: Selector, features: Sequence[str] = CALIBRATOR_FEATURES,
                  log: Callable[[str], None] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Out-of-fold figures of every arm in `ARMS`: ``{arm: {held-out name: dataset_figures}}``."""
    names = list(selector.sets)
    out: dict[str, dict[str, dict[str, float]]] = {a: {} for a in ARMS}
    for h in names:
        train = [n for n in names if n != h]
        choice = selector.choose(train)
        pooled_cand, (pt0, pb) = choice.pooled
        ps = selector.scored(h, selector.cands.index(pooled_cand))
        out[ARMS[0]][h] = dataset_figures(ps, group_temperatures(ps, pt0, pb), selector.bounds[h])
        s, (t0, b) = selector.scored_under(h, choice)
        out[ARMS[1]][h] = dataset_figures(s, group_temperatures(s, t0, b), selector.bounds[h])
        for arm, how in ((ARMS[2], "nll"), (ARMS[3], "top_label")):
            cal = selector.calibrator(train, choice, how, features)
            out[arm][h] = dataset_figures(s, calibrated_temperatures(s, cal), selector.bounds[h])
        if log is not None:
            log(f"held out {h}: " + ", ".join(f"{a} {out[a][h]['normalised']:.1f}" for a in ARMS))
    return out


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


def served_scoring(choice: GroupChoice, calibrator: Calibrator | None, cascade: Cascade | None,
                   embedding_sha256: str | None) -> RequestScoring:
    """The `RequestScoring` that serves ``choice`` (the pooled candidate is the default config)."""
    def config(cand: GroupCandidate, temps: tuple[float, float]) -> ScoringConfig:
        w = float(cand.embedding_weight)
        return ScoringConfig(rule=cand.rule, temperature=round(float(temps[0]), 6), k_exponent=round(float(temps[1]), 6),
                             embedding_weight=w, embedding_sha256=embedding_sha256 if w else None)

    groups = {g: config(c, t) for g, (c, t, _) in choice.per_group.items()}
    return RequestScoring(config(*choice.pooled), groups, calibrator, cascade)
