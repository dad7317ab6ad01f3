"""Out-of-fold choice of the per-group scoring, the confidence calibrator and the label cascade.

Inputs are cached dev sets (`zsnli.selection.score_cache`); everything is scored with the served code
(`zsnli.request_scoring`, `zsnli.scoring`). The unit of every figure is the normalised calibrated macro-F1
(`zsnli.metrics`), and datasets are weighted **by task kind as the benchmark is** (`kind_weights`): a
kind's weight is its share of the benchmark's datasets, split evenly over the dev sets of that kind;
kinds the benchmark does not have weigh 0 in the objective and are reported beside it.

The family (`Spec`, `GroupChoice`): an embedding weight w from `search.EMBEDDING_WEIGHTS` with the
entailment rule (`group_candidates`), chosen pooled, its temperature fitted by NLL or on the objective
itself (`fit_temperature_on_objective`), pooled or per request group (`zsnli.request_scoring.GROUPS`; a
group with fewer than `MIN_GROUP_SETS` datasets in the fold takes the pooled one). On top, the confidence calibrator
(`zsnli.request_scoring.Calibrator`, `fit_calibrator`) is fitted on every fold dataset, by NLL or by the
top-label binary cross-entropy (Top-versus-All, Le Coz et al., NeurIPS 2024).

The fits themselves (the temperature by NLL or on the objective, the calibrator) are in
`zsnli.selection.fits`.

Leave-one-dataset-out (`leave_one_out`): for each held-out dev set h, every arm (`Spec`) is fitted on
the other sets only (`fold_scoring`), then h is scored with the served code (`served_figures`).
Leave-one-kind-out (`leave_out` over `kind_folds`): every set of one task kind held out at once, the arm
fitted on the other kinds, as the benchmark's new datasets and unfamiliar mix are met.
`fold_scoring` on every set makes the shipped choice.

Imports: numpy, scipy, ``zsnli.harness.cli`` (``json_problem``), ``zsnli.metrics``, ``zsnli.scoring``,
``zsnli.request_scoring``,
``zsnli.selection.search`` (packing, the fast figures), ``zsnli.selection.fits``, ``zsnli.selection.score_cache``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..harness.cli import json_problem
from ..request_scoring import (CALIBRATOR_FEATURES, GROUPS, Calibrator, Cascade, RequestScoring,
                               cascade_scores, prunes, request_group)
from ..scoring import ScoringConfig, scores_from_logits
from . import search as sel
from .fits import (CALIBRATOR_RIDGE, FEATURE_INDEX, Scored, fit_calibrator,
                   fit_group_temperature, fit_temperature_on_objective)
from .score_cache import CONTENT_FREE_PREMISE, CachedSet

MIN_GROUP_SETS = 2
"""A group needs this many datasets in the fold for its own choice; otherwise it takes the pooled one."""


# --------------------------------------------------------------------------- kinds and weights


def read_kinds(path: str | Path) -> dict[str, Any]:
    """``benchmark_kinds.json``: ``{"benchmark": {name: {"kind": str, ...}}, "zsc_dev": {name: kind}}``; only each
    benchmark dataset's ``kind`` is read (its ``labels`` count, and any other key, is not).

    Raises ``ValueError`` (one line naming the file and entry) when the file is unreadable, lacks either object, a
    benchmark entry has no ``kind`` string or a zsc_dev kind is not a string."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the task kinds file {path}: {json_problem(exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmark"), dict) or not isinstance(doc.get("zsc_dev"), dict):
        raise ValueError(f"{path}: expected 'benchmark' and 'zsc_dev' objects")
    for name, entry in doc["benchmark"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str) or not entry["kind"]:
            raise ValueError(f'{path}: benchmark dataset {name!r} needs a "kind" string, e.g. {{"kind": "topic"}}')
    for name, kind in doc["zsc_dev"].items():
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"{path}: zsc_dev set {name!r}: its kind must be a non-empty string, not {kind!r}")
    return doc


def check_kinds(kinds: Mapping[str, Any], names: Sequence[str], path: str | Path) -> None:
    """Before any scoring: every zsc-dev set in ``names`` has a kind in ``kinds`` (`read_kinds` of ``path``), and
    both ways of holding out leave something to fit on (at least 2 sets: `dataset_folds`; at least 2 kinds among
    them: `kind_folds`). Raises ``ValueError`` (one line naming the sets, the kind or the file)."""
    missing = [n for n in names if n not in kinds["zsc_dev"]]
    if missing:
        raise ValueError(f"{path}: no task kind for the zsc-dev set(s) {', '.join(missing)}: its \"zsc_dev\" "
                         'object needs "<set>": "<kind>" for every set of the zsc-dev folder')
    if len(names) < 2:
        raise ValueError(f"the zsc-dev folder holds one set ({', '.join(names)}): leaving it out leaves nothing "
                         "to choose on; give at least 2 sets")
    present = sorted({kinds["zsc_dev"][n] for n in names})
    if len(present) < 2:
        raise ValueError(f"{path}: every zsc-dev set is of kind {present[0]!r}: leaving one kind out holds out every "
                         "set; give sets of at least 2 kinds")


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
    static[:, FEATURE_INDEX["bias"]] = 1.0
    static[:, FEATURE_INDEX["log_k"]] = np.log(cs.k)
    for g in ("negation", "binary", "many"):
        static[:, FEATURE_INDEX[g]] = float(group == g)
    if cand.embedding_weight:
        nli_p, cos_p = sel.pad_flat(cs, nli), sel.pad_flat(cs, cos)
        mask = np.arange(nli_p.shape[1])[None, :] < cs.k[:, None]
        static[:, FEATURE_INDEX["agree"]] = (np.where(mask, nli_p, -np.inf).argmax(axis=1)
                                  == np.where(mask, cos_p, -np.inf).argmax(axis=1)).astype(np.float64)
    static[:, FEATURE_INDEX["log_tokens"]] = np.log1p(np.maximum(tokens, 0))
    return Scored(sel.pack(cs, s), static, group, float(pairs.mean()))


# --------------------------------------------------------------------------- figures


def dataset_figures(s: Scored, temps: np.ndarray, bounds: sel.Bounds) -> dict[str, float]:
    """``{"normalised", "ece", "macro_f1", "pairs_per_row"}`` of one scored dataset at per-row temperatures."""
    f1 = sel.fast_macro_f1(s.packed)
    norm, ece = sel.fast_normalised(s.packed, f1, temps, bounds)
    return {"normalised": norm, "ece": ece, "macro_f1": f1, "pairs_per_row": s.pairs_per_row}


def group_temperatures(s: Scored, t0: float, b: float) -> np.ndarray:
    """Per-row T(K) = t0 x K^b of a scored dataset."""
    return sel.row_temperatures(s.packed, math.log(t0), b)


# --------------------------------------------------------------------------- the choice


@dataclass(frozen=True)
class GroupChoice:
    """What one fold (or all data) chose: the candidate for every group and its pooled (t0, b)."""

    pooled: tuple[GroupCandidate, tuple[float, float]]

    def for_group(self, group: str) -> tuple[GroupCandidate, tuple[float, float]]:
        """The candidate and (t0, b) of ``group``: the pooled ones (w is chosen for all groups at once)."""
        return self.pooled


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

    def choose_cached(self, names: Sequence[str], t_fit: str = "nll") -> GroupChoice:
        """The pooled choice on ``names`` (`best`), memoised per set of names."""
        key = (tuple(sorted(names)), t_fit)
        if key not in self._choices:
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
    """One arm of the choice: w is chosen pooled (one candidate for every group; a w per group was never
    among the arms compared and was taken out in issue 41, see git history), how temperatures are fitted (``nll`` or ``objective``:
    `fit_temperature_on_objective`), whether each group gets its own T(K) (``group_t``; pooled for a group
    with < `MIN_GROUP_SETS` sets) and the calibrator on top (``(fit, ridge)`` or None)."""

    t_fit: str = "nll"
    group_t: bool = False
    calibrator: tuple[str, float] | None = None

    @property
    def label(self) -> str:
        cal = f" + calibrator {self.calibrator[0]}/{self.calibrator[1]:g}" if self.calibrator else ""
        return f"w pooled, T {'per group' if self.group_t else 'pooled'} by {self.t_fit}{cal}"


SPECS = (Spec(), Spec(t_fit="objective"), Spec(t_fit="objective", group_t=True),
         Spec(t_fit="objective", calibrator=("nll", 1e-2)), Spec(t_fit="objective", calibrator=("top_label", 1e-2)))
"""The arms compared out of fold (5; with 10 candidates for w each: 50 fitted configurations per fold)."""


def fold_scoring(selector: "Selector", train: Sequence[str], spec: Spec, embedding_sha256: str | None) -> RequestScoring:
    """The `RequestScoring` that ``spec`` fits on the datasets ``train`` (served as is)."""
    choice = selector.choose_cached(train, spec.t_fit)
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
        if spec.group_t and len(members) >= MIN_GROUP_SETS:
            groups[g] = config(choice.for_group(g)[0], fit(members))
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
