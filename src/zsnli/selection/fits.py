"""The fits of the out-of-fold choice (`zsnli.selection.grouped`): one dataset's scores under one candidate
(`Scored`), the temperature T(K) = t0 x K^b fitted by NLL (`fit_group_temperature`) or on the objective
itself (`fit_temperature_on_objective`), and the confidence calibrator (`fit_calibrator`, by NLL or by the
top-label binary cross-entropy: Top-versus-All, Le Coz et al., NeurIPS 2024).

May import: numpy, scipy (lazily), `zsnli.metrics`, `zsnli.request_scoring` (the calibrator and its
features), `zsnli.selection.search` (packing, the NLL temperature fit, the fast figures).
Used by `zsnli.selection.grouped`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import metrics
from ..request_scoring import CALIBRATOR_FEATURES, LOG_T_RANGE, Calibrator
from . import search as sel

CALIBRATOR_RIDGE = 1e-3
"""L2 penalty on the calibrator's non-bias coefficients (per unit of the weighted mean loss)."""
CALIBRATOR_FITS = ("nll", "top_label")


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
        phi[:, FEATURE_INDEX["top1"]] = srt[:, -1]
        phi[:, FEATURE_INDEX["margin"]] = srt[:, -1] - srt[:, -2]
        plogp = np.where(probs > 0, probs * np.log(np.maximum(probs, 1e-300)), 0.0)
        phi[:, FEATURE_INDEX["entropy"]] = -plogp.sum(axis=1) / np.log(self.packed.k)
        return phi


FEATURE_INDEX = {name: i for i, name in enumerate(CALIBRATOR_FEATURES)}


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


def calibrator_loss_and_grad(p: sel.Packed, phi: np.ndarray, w: np.ndarray, log_t_base: np.ndarray, theta: np.ndarray,
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
    (`calibrator_loss_and_grad`). BFGS from theta = 0 (the group temperatures unchanged). Raises ``ValueError`` on an
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
        parts = [calibrator_loss_and_grad(p, phi, w, lt, theta, how) for p, phi, w, lt in buckets]
        return (sum(v for v, _ in parts) + ridge * float(theta @ theta),
                np.sum([g for _, g in parts], axis=0) + 2 * ridge * theta)

    res = minimize(value_grad, x0=np.zeros(len(idx)), jac=True, method="BFGS", options={"maxiter": 500})
    return Calibrator(tuple(features), tuple(round(float(c), 6) for c in res.x), how)


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
