"""Leave-one-dataset-out choice of the served scoring and calibration.

Inputs are the cached per-pair NLI logits, content-free logits and cosines of
the dev datasets (`zsnli.selection.score_cache`). A *candidate* is a rule (`zsnli.scoring.RULES`),
the content-free correction off/on, an embedding weight w, and a temperature
form: ``global`` (one T) or ``t0*K^b`` (``ScoringConfig.temperature_for``). Its
temperature is fitted by NLL with every dataset weighted equally (`fit_temperature`).

Leave-one-dataset-out (`leave_one_out`): for each dataset h in turn, every
candidate's T is fitted on the other datasets and the candidate is chosen on
them by `objective`; the chosen one is then scored on h, which played no part.
The objective is the mean normalised calibrated macro-F1 minus a robustness
penalty: ``ROBUSTNESS_LAMBDA`` points for each point by which the worst dataset
falls more than ``ROBUSTNESS_MARGIN`` points below embedding similarity
(softmax(20 x cos), `zsnli.compare.arms.baselines.DEFAULT_EMBEDDING_SCALE`) on the same rows.

During the choice, arg-max predictions use ``np.argmax`` (exact ties among float
scores do not occur in practice) and F1/ECE/normalised come from `zsnli.metrics`;
every figure that is reported is recomputed with the served code
(`zsnli.scoring.label_probabilities`) and `zsnli.metrics.score_rows`.

The negation rule (`zsnli.selection.negation`) is evaluated the same way on the datasets
whose requests are statement/negation pairs (`negation_leave_one_out`).

Imports: numpy, scipy, ``zsnli.metrics``, ``zsnli.scoring`` (pure functions),
``zsnli.selection.negation``, ``zsnli.selection.score_cache`` (reading), ``zsnli.compare.arms.baselines`` (the scale constant).
The CLI and calibration.json writing live in `zsnli.selection.cli`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import metrics
from ..compare.arms.baselines import DEFAULT_EMBEDDING_SCALE
from .negation import NegationRule, negation_pair, negation_probabilities, pair_difference
from .score_cache import CONTENT_FREE_PREMISE, CachedSet
from ..scoring import RULES, VALUE_RANGES, ScoringConfig, label_probabilities, scores_from_logits

EMBEDDING_WEIGHTS = (0.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0)
"""The grid of issue 12 (0-40) widened to 60 and 80 after the first run chose w = 40, its upper edge."""
TEMPERATURE_FORMS = ("global", "t0*K^b")
ROBUSTNESS_MARGIN = 10.0
"""Points below embedding similarity a dataset may fall before the penalty applies (issue 12's target)."""
ROBUSTNESS_LAMBDA = 1.0
"""Objective points lost per point of the worst dataset's shortfall beyond the margin."""
LOG_T_BOUNDS = (math.log(VALUE_RANGES["temperature"][0]), math.log(VALUE_RANGES["temperature"][1]))
"""log t0 bounds of the fit: exactly the temperatures `zsnli.scoring.ScoringConfig` accepts (the server
refuses a calibration.json outside them, so the selection must never produce one)."""
K_EXPONENT_BOUNDS = (-2.0, 2.0)
OFFLINE_DIGEST = "offline"
"""Embedding digest placeholder for configs built only to compute figures from cached cosines (never shipped)."""


@dataclass(frozen=True)
class Candidate:
    """One scoring configuration before its temperature is fitted."""

    rule: str
    content_free: bool
    embedding_weight: float
    temperature_form: str

    @property
    def label(self) -> str:
        """Short readable id, e.g. ``entailment_logprob+cf+w20/t0*K^b``."""
        cf = "+cf" if self.content_free else ""
        return f"{self.rule}{cf}+w{self.embedding_weight:g}/{self.temperature_form}"

    def config(self, t0: float, b: float, embedding_sha256: str | None) -> ScoringConfig:
        """The served `ScoringConfig` at ``T(K) = t0 * K ** b``."""
        w = float(self.embedding_weight)
        return ScoringConfig(rule=self.rule, temperature=round(float(t0), 6), k_exponent=round(float(b), 6),
                             content_free_premise=CONTENT_FREE_PREMISE if self.content_free else None,
                             embedding_weight=w, embedding_sha256=embedding_sha256 if w else None)


def candidates(weights: Sequence[float] = EMBEDDING_WEIGHTS) -> list[Candidate]:
    """Every rule x content-free off/on x weight x temperature form (3 x 2 x 10 x 2 = 120 by default)."""
    return [Candidate(r, cf, float(w), form) for r in RULES for cf in (False, True) for w in weights
            for form in TEMPERATURE_FORMS]


# --------------------------------------------------------------------------- packed scores


@dataclass
class Packed:
    """One dataset's pre-temperature scores, padded: ``scores``/``mask``/``classes`` are ``[N, Kmax]``.

    k: labels per row ``[N]``; gold: gold index per row ``[N]``; gold_classes ``[N]``; n_classes.
    """

    scores: np.ndarray
    mask: np.ndarray
    classes: np.ndarray
    k: np.ndarray
    gold: np.ndarray
    gold_classes: np.ndarray
    n_classes: int


def pad_flat(cs: CachedSet, flat: np.ndarray) -> np.ndarray:
    """A flat per-pair array ``[P]`` as ``[N, Kmax]`` (padding 0)."""
    kmax = int(cs.k.max())
    out = np.zeros((len(cs), kmax), dtype=np.float64)
    cols = np.arange(kmax)[None, :]
    mask = cols < cs.k[:, None]
    out[mask] = flat
    return out


def pack(cs: CachedSet, flat_scores: np.ndarray) -> Packed:
    """`Packed` of ``cs`` with per-pair scores ``flat_scores`` ``[P]``."""
    kmax = int(cs.k.max())
    mask = np.arange(kmax)[None, :] < cs.k[:, None]
    classes = np.zeros((len(cs), kmax), dtype=np.int64)
    classes[mask] = cs.label_classes
    gold_classes = classes[np.arange(len(cs)), cs.gold]
    return Packed(pad_flat(cs, flat_scores), mask, classes, cs.k.astype(np.float64), cs.gold.astype(np.int64),
                  gold_classes, len(cs.classes))


def candidate_scores(cs: CachedSet, cand: Candidate) -> np.ndarray:
    """Per-pair ``score - cf + w * cos`` of ``cs`` under ``cand`` (`zsnli.scoring.combined_scores`'s formula), ``[P]``."""
    s = scores_from_logits(cs.logits, cand.rule, cs.entail_idx, cs.contra_idx)
    if cand.content_free:
        s = s - scores_from_logits(cs.cf_logits, cand.rule, cs.entail_idx, cs.contra_idx)
    return s + cand.embedding_weight * cs.cosine.astype(np.float64)


# --------------------------------------------------------------------------- temperature


def row_temperatures(p: Packed, log_t0: float, b: float) -> np.ndarray:
    """``T(K) = exp(log_t0) * K ** b`` of each row ``[N]`` (the form `ScoringConfig.temperature_for` applies)."""
    return np.exp(log_t0 + b * np.log(p.k))


def softmax_rows(p: Packed, temps: np.ndarray) -> np.ndarray:
    """Row-wise ``softmax(scores / T)`` over each row's K labels ``[N, Kmax]`` (padding gets 0)."""
    z = np.where(p.mask, p.scores / temps[:, None], -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(p.mask, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def stack(packs: Sequence[Packed]) -> tuple[Packed, np.ndarray]:
    """All datasets' rows in one `Packed` (padded to the largest K) and each row's dataset index ``[R]``."""
    kmax = max(p.scores.shape[1] for p in packs)

    def widen(a: np.ndarray, fill) -> np.ndarray:
        out = np.full((a.shape[0], kmax), fill, dtype=a.dtype)
        out[:, : a.shape[1]] = a
        return out

    joined = Packed(np.concatenate([widen(p.scores, 0.0) for p in packs]),
                    np.concatenate([widen(p.mask, False) for p in packs]),
                    np.concatenate([widen(p.classes, 0) for p in packs]),
                    np.concatenate([p.k for p in packs]), np.concatenate([p.gold for p in packs]),
                    np.concatenate([p.gold_classes for p in packs]), max(p.n_classes for p in packs))
    return joined, np.concatenate([np.full(len(p.k), i) for i, p in enumerate(packs)])


def dataset_weights(owner: np.ndarray, include: np.ndarray) -> np.ndarray:
    """Row weights ``[R]`` giving every included dataset equal total weight (summing to 1); others 0.

    owner: dataset index of each row; include: bool ``[D]``. Raises ``ValueError`` when none is included.
    """
    if not include.any():
        raise ValueError("no datasets to fit the temperature on")
    counts = np.bincount(owner, minlength=include.size).astype(np.float64)
    per_row = np.where(include, 1.0 / np.maximum(counts, 1.0), 0.0) / include.sum()
    return per_row[owner]


def nll_and_grad(p: Packed, weights: np.ndarray, log_t0: float, b: float) -> tuple[float, np.ndarray]:
    """Weighted NLL (nats) of the gold labels under ``softmax(s / T(K))`` and its gradient.

    T(K) = exp(log_t0) * K ** b; weights ``[R]`` (see `dataset_weights`: each dataset's mean NLL
    counts equally). With z = s / T: d NLL_i / d log_t0 = z_gold - E_p[z], d NLL_i / d b = log K_i x
    the same. Returns ``(value, [d/dlog_t0, d/db])``.
    """
    temps = row_temperatures(p, log_t0, b)
    z = np.where(p.mask, p.scores / temps[:, None], 0.0)
    probs = softmax_rows(p, temps)
    zg = z[np.arange(len(p.gold)), p.gold]
    m = np.where(p.mask, z, -np.inf).max(axis=1)
    lse = m + np.log(np.where(p.mask, np.exp(z - m[:, None]), 0.0).sum(axis=1))
    g = weights * (zg - (probs * z).sum(axis=1))
    return float(weights @ (lse - zg)), np.array([g.sum(), (g * np.log(p.k)).sum()])


def fit_temperature(p: Packed, weights: np.ndarray, form: str) -> tuple[float, float]:
    """``(t0, b)`` minimising `nll_and_grad`; ``b = 0`` for ``form="global"``.

    global: bounded Brent on log t0 (`LOG_T_BOUNDS`); ``t0*K^b``: BFGS with the analytic gradient
    (measured 2.5x faster than L-BFGS-B here), the result clipped to `LOG_T_BOUNDS` / `K_EXPONENT_BOUNDS`. Raises ``ValueError`` on an unknown form.
    """
    from scipy.optimize import minimize, minimize_scalar

    if form not in TEMPERATURE_FORMS:
        raise ValueError(f"unknown temperature form {form!r}; expected one of {TEMPERATURE_FORMS}")
    buckets = _buckets(p, weights)

    def value_grad(log_t0: float, b: float) -> tuple[float, np.ndarray]:
        parts = [nll_and_grad(sub, w, log_t0, b) for sub, w in buckets]
        return sum(v for v, _ in parts), np.sum([g for _, g in parts], axis=0)

    if form == "global":
        res = minimize_scalar(lambda x: value_grad(x, 0.0)[0], bounds=LOG_T_BOUNDS, method="bounded",
                              options={"xatol": 1e-4})
        return math.exp(float(res.x)), 0.0
    res = minimize(lambda x: value_grad(x[0], x[1]), x0=[0.0, 0.0], jac=True, method="BFGS")
    log_t0, b = np.clip(res.x, [LOG_T_BOUNDS[0], K_EXPONENT_BOUNDS[0]], [LOG_T_BOUNDS[1], K_EXPONENT_BOUNDS[1]])
    return math.exp(float(log_t0)), float(b)


def _buckets(p: Packed, weights: np.ndarray) -> list[tuple[Packed, np.ndarray]]:
    """The rows with weight > 0, grouped by K and cut to K columns (no padding work in the fit)."""
    out = []
    for k in np.unique(p.k[weights > 0]):
        rows = (weights > 0) & (p.k == k)
        kk = int(k)
        out.append((Packed(p.scores[rows, :kk], p.mask[rows, :kk], p.classes[rows, :kk], p.k[rows], p.gold[rows],
                           p.gold_classes[rows], p.n_classes), weights[rows]))
    return out


# --------------------------------------------------------------------------- fast figures


@dataclass(frozen=True)
class Bounds:
    """Floor and ceiling of a dataset's calibrated macro-F1 (`zsnli.metrics.score_rows`)."""

    floor: float
    ceiling: float


def dataset_bounds(cs: CachedSet) -> Bounds:
    """Floor/ceiling of ``cs`` from `metrics.score_rows` (they do not depend on the probabilities)."""
    card = score_cached(cs, embedding_probabilities(cs))
    return Bounds(card.floor, card.ceiling)


def fast_normalised(p: Packed, f1: float, temps: np.ndarray, bounds: Bounds) -> tuple[float, float]:
    """``(normalised, ece)`` of packed scores at per-row temperatures, arg-max by ``np.argmax``."""
    probs = softmax_rows(p, temps)
    pred = probs.argmax(axis=1)
    correct = p.classes[np.arange(len(pred)), pred] == p.gold_classes
    ece = metrics.expected_calibration_error(probs.max(axis=1), correct)
    return metrics.normalise(metrics.calibrated_macro_f1(f1, ece), bounds.floor, bounds.ceiling), ece


def fast_macro_f1(p: Packed) -> float:
    """Macro-F1 of the arg-max of packed scores (independent of any positive per-row temperature)."""
    pred = np.where(p.mask, p.scores, -np.inf).argmax(axis=1)
    return metrics.macro_f1(p.gold_classes, p.classes[np.arange(len(pred)), pred], p.n_classes)


def objective(norms: np.ndarray, baseline: np.ndarray) -> float:
    """Mean normalised score minus ``ROBUSTNESS_LAMBDA`` x the worst shortfall beyond ``ROBUSTNESS_MARGIN``.

    norms, baseline: ``[D]`` normalised scores (0-100) of a candidate and of embedding similarity.
    """
    shortfall = float(np.max(baseline - norms)) - ROBUSTNESS_MARGIN
    return float(np.mean(norms)) - ROBUSTNESS_LAMBDA * max(0.0, shortfall)


# --------------------------------------------------------------------------- served-code figures


def embedding_probabilities(cs: CachedSet, scale: float = DEFAULT_EMBEDDING_SCALE) -> list[np.ndarray]:
    """softmax(scale x cos) over each row's labels (the embedding-similarity baseline)."""
    off = cs.offsets
    out = []
    for i in range(len(cs)):
        z = scale * cs.cosine[off[i]:off[i + 1]].astype(np.float64)
        e = np.exp(z - z.max())
        out.append(e / e.sum())
    return out


def served_probabilities(cs: CachedSet, config: ScoringConfig) -> list[np.ndarray]:
    """Each row's probabilities exactly as the server computes them (`zsnli.scoring.label_probabilities`)."""
    off = cs.offsets
    s = scores_from_logits(cs.logits, config.rule, cs.entail_idx, cs.contra_idx)
    cf = scores_from_logits(cs.cf_logits, config.rule, cs.entail_idx, cs.contra_idx)
    use_cf = config.content_free_premise is not None
    if use_cf and config.content_free_premise != CONTENT_FREE_PREMISE:
        raise ValueError(f"the cache holds content-free scores for {CONTENT_FREE_PREMISE!r} only")
    return [label_probabilities(s[a:b], config, cf[a:b] if use_cf else None, cs.cosine[a:b].astype(np.float64))
            for a, b in zip(off[:-1], off[1:])]


def score_cached(cs: CachedSet, probs: Sequence[np.ndarray]) -> metrics.Scorecard:
    """`metrics.score_rows` of per-row probabilities of ``cs`` (classes mapped per row)."""
    off = cs.offsets
    label_classes = [cs.label_classes[a:b] for a, b in zip(off[:-1], off[1:])]
    return metrics.score_rows(probs, cs.gold.tolist(), n_classes=len(cs.classes), label_classes=label_classes)


# --------------------------------------------------------------------------- leave one out


@dataclass
class Grid:
    """Every candidate's figures: ``oof_norm[c, h]`` is candidate c's normalised score on h with T fitted
    without h; ``fold_norm[c, h, d]`` its score on d under that same T; ``temps[c, h]`` = (t0, b) of that
    fit; ``full_norm[c, d]`` / ``full_temps[c]`` with T fitted on all datasets."""

    names: list[str]
    cands: list[Candidate]
    fold_norm: np.ndarray
    temps: np.ndarray
    full_norm: np.ndarray
    full_temps: np.ndarray
    baseline: np.ndarray


def evaluate_grid(sets: dict[str, CachedSet], cands: Sequence[Candidate], log=None) -> Grid:
    """Fit and score every candidate for every held-out dataset (and on all); see `Grid`."""
    names = list(sets)
    base_cards = {n: score_cached(cs, embedding_probabilities(cs)) for n, cs in sets.items()}
    bounds = {n: Bounds(c.floor, c.ceiling) for n, c in base_cards.items()}
    baseline = np.array([base_cards[n].normalised for n in names])
    D, C = len(names), len(cands)
    fold_norm, temps = np.zeros((C, D, D)), np.zeros((C, D, 2))
    full_norm, full_temps = np.zeros((C, D)), np.zeros((C, 2))
    for ci, cand in enumerate(cands):
        packs = [pack(sets[n], candidate_scores(sets[n], cand)) for n in names]
        joined, owner = stack(packs)
        f1 = [fast_macro_f1(p) for p in packs]

        def norms(t0: float, b: float) -> np.ndarray:
            return np.array([fast_normalised(p, f, row_temperatures(p, math.log(t0), b), bounds[n])[0]
                             for p, f, n in zip(packs, f1, names)])

        for h in range(D):
            t0, b = fit_temperature(joined, dataset_weights(owner, np.arange(D) != h), cand.temperature_form)
            temps[ci, h] = (t0, b)
            fold_norm[ci, h] = norms(t0, b)
        full_temps[ci] = fit_temperature(joined, dataset_weights(owner, np.ones(D, dtype=bool)), cand.temperature_form)
        full_norm[ci] = norms(*full_temps[ci])
        if log is not None:
            log(f"{ci + 1}/{C} {cand.label}: all-data mean {np.mean(full_norm[ci]):.1f}")
    return Grid(names, list(cands), fold_norm, temps, full_norm, full_temps, baseline)


def leave_one_out(grid: Grid) -> list[int]:
    """For each held-out dataset h, the index of the candidate chosen by `objective` on the others."""
    chosen = []
    D = len(grid.names)
    for h in range(D):
        train = [d for d in range(D) if d != h]
        values = [objective(grid.fold_norm[c, h, train], grid.baseline[train]) for c in range(len(grid.cands))]
        chosen.append(int(np.argmax(values)))
    return chosen


def choose_on_all(grid: Grid) -> int:
    """The candidate chosen by `objective` on every dataset, T fitted on all (the shipped choice)."""
    return int(np.argmax([objective(grid.full_norm[c], grid.baseline) for c in range(len(grid.cands))]))


# --------------------------------------------------------------------------- negation pairs


def is_negation_set(cs: CachedSet) -> bool:
    """True when every row of ``cs`` is a two-label request detected by `zsnli.selection.negation.negation_pair`."""
    off = cs.offsets
    return all(negation_pair([cs.hypotheses[j] for j in cs.hyp_index[a:b]]) is not None
               for a, b in zip(off[:-1], off[1:]))


def negation_pack(cs: CachedSet, rule: NegationRule) -> tuple[Packed, np.ndarray]:
    """Packed ``[N, 2]`` scores (d, 0) in (positive, negation) order, and each row's (pos, neg) pair positions."""
    off = cs.offsets
    pos_neg = np.array([negation_pair([cs.hypotheses[j] for j in cs.hyp_index[a:b]]) for a, b in
                        zip(off[:-1], off[1:])], dtype=np.int64) + off[:-1, None]
    pos, neg = pos_neg[:, 0], pos_neg[:, 1]
    d = pair_difference(cs.logits[pos], cs.entail_idx, cs.contra_idx,
                        cs.cf_logits[pos] if rule.content_free else None,
                        cs.cosine[pos], cs.cosine[neg], rule.embedding_weight)
    classes = cs.label_classes[pos_neg]
    gold_pos = (cs.label_classes[pos] == cs.label_classes[off[:-1] + cs.gold]).astype(np.int64)
    packed = Packed(np.stack([d, np.zeros_like(d)], axis=1), np.ones((len(d), 2), dtype=bool), classes,
                    np.full(len(d), 2.0), 1 - gold_pos, classes[np.arange(len(d)), 1 - gold_pos], len(cs.classes))
    return packed, pos_neg


def negation_served_probabilities(cs: CachedSet, rule: NegationRule) -> list[np.ndarray]:
    """Each row's probabilities over its labels in request order under the negation rule."""
    packed, pos_neg = negation_pack(cs, rule)
    p = negation_probabilities(packed.scores[:, 0], rule.temperature)
    off = cs.offsets
    out = []
    for i, (a, b) in enumerate(zip(off[:-1], off[1:])):
        row = np.zeros(b - a)
        row[pos_neg[i, 0] - a], row[pos_neg[i, 1] - a] = p[i, 0], p[i, 1]
        out.append(row)
    return out


def negation_variants(weights: Sequence[float] = EMBEDDING_WEIGHTS) -> list[NegationRule]:
    """Content-free off/on x embedding weight (T is fitted per fold)."""
    return [NegationRule(1.0, cf, float(w)) for cf in (False, True) for w in weights]


def fit_negation(sets: Sequence[CachedSet], variant: NegationRule) -> NegationRule:
    """``variant`` with T_neg fitted by NLL on ``sets`` (each dataset weighted equally)."""
    joined, owner = stack([negation_pack(cs, variant)[0] for cs in sets])
    t, _ = fit_temperature(joined, dataset_weights(owner, np.ones(len(sets), dtype=bool)), "global")
    return NegationRule(round(t, 6), variant.content_free, variant.embedding_weight)


def negation_leave_one_out(sets: dict[str, CachedSet], grid: Grid, main_choice: Sequence[int],
                           variants: Sequence[NegationRule] | None = None) -> dict[str, Any]:
    """Out-of-fold comparison on the negation-pair datasets: the main choice alone vs main + negation rule.

    For each negation dataset h, each variant's T_neg is fitted on the other negation datasets and the
    variant (or "off": the main candidate chosen without h) is chosen by `objective` on them. Returns
    ``{"datasets": {h: {"choice": "off" | "negation rule", "rule": {...} | None, "scorecard": {...},
    "main_scorecard": {...}}}, "n": count}`` (scorecards: `metrics.Scorecard.as_dict` of the held-out set
    with the choice, and with the main candidate alone), computed with the served-code paths.
    """
    variants = list(variants or negation_variants())
    neg_names = [n for n in grid.names if is_negation_set(sets[n])]
    bounds = {n: dataset_bounds(sets[n]) for n in neg_names}
    idx = {n: grid.names.index(n) for n in neg_names}
    out: dict[str, Any] = {}
    for h in neg_names:
        train = [n for n in neg_names if n != h]
        fitted = [fit_negation([sets[n] for n in train], v) for v in variants]
        c_h = main_choice[idx[h]]
        off_norms = np.array([grid.fold_norm[c_h, idx[h], idx[n]] for n in train])
        base = np.array([grid.baseline[idx[n]] for n in train])
        best, best_val = None, objective(off_norms, base)
        for rule in fitted:
            norms = np.array([negation_norm(sets[n], rule, bounds[n]) for n in train])
            val = objective(norms, base)
            if val > best_val:
                best, best_val = rule, val
        main_cfg = grid.cands[c_h].config(*grid.temps[c_h, idx[h]], OFFLINE_DIGEST)
        main_card = score_cached(sets[h], served_probabilities(sets[h], main_cfg))
        card = main_card if best is None else score_cached(sets[h], negation_served_probabilities(sets[h], best))
        out[h] = {"choice": "off" if best is None else "negation rule", "rule": None if best is None else vars(best),
                  "scorecard": card.as_dict(), "main_scorecard": main_card.as_dict()}
    return {"datasets": out, "n": len(neg_names)}


def negation_norm(cs: CachedSet, rule: NegationRule, bounds: Bounds) -> float:
    """Normalised score (`fast_normalised`, the selection objective's unit) of negation rule ``rule`` on one cached negation-pair set."""
    packed, _ = negation_pack(cs, rule)
    f1 = fast_macro_f1(packed)
    return fast_normalised(packed, f1, np.full(len(packed.k), rule.temperature), bounds)[0]
