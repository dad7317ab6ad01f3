"""Logits -> probabilities: the scoring rules, `ScoringConfig` and the calibration reader.

A zero-shot request is one premise (the document) and K hypotheses (the
label descriptions). The NLI runtime (`zsnli.runtime.model`) gives 3-way (or 2-way:
entailment / not_entailment) logits per pair; ``scores_from_logits`` turns them into one score per pair according to
a scoring rule, and ``label_probabilities`` turns the K scores of one request
into K probabilities with a temperature that may depend on K
(``multi_label_probabilities`` scores each label on its own).

Everything here is synchronous, stateless numpy; the service
(`zsnli.serving.service`) and calibration (`zsnli.selection.calibration`) call it.

May import: numpy, the standard library and `zsnli.harness.cli` (`one_line`; standard library only).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .harness.cli import one_line

#: Scoring rules understood by `scores_from_logits`.
#: ``entailment``: the entailment logit.
#: ``entailment_minus_contradiction``: entailment logit minus contradiction logit.
#: ``entailment_logprob``: log p(entailment) under the softmax over all the head's classes.
RULES = ("entailment", "entailment_minus_contradiction", "entailment_logprob")


class ScoringConfigError(ValueError):
    """A scoring configuration (or calibration.json) is invalid."""


# --------------------------------------------------------------------------- config


#: Valid range, inclusive, of every numeric value of a `ScoringConfig` (calibration.json's
#: ``chosen``), checked when one is built, so a bad calibration is refused before the server
#: listens. Sources: selection fits t0 inside this very range and ``b`` in [-2, 2]
#: (`zsnli.selection.search.fit_temperature`), and picks w from 0..80 (`zsnli.selection.search.EMBEDDING_WEIGHTS`);
#: the ranges hold those with room. With K <= 4096 labels (``ZSNLI_MAX_LABELS``' range),
#: T(K) = t * K ** b lies in [1e-3 * 4096 ** -4, 1e3 * 4096 ** 4] = [3.6e-18, 2.8e17], so
#: scores / T(K) stays finite for any finite float32 logits (|s| < 1e39: 1e39 / 3.6e-18 < 1e57).
VALUE_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (1e-3, 1e3),
    "k_exponent": (-4.0, 4.0),
    "embedding_weight": (0.0, 1000.0),
}


@dataclass(frozen=True)
class ScoringConfig:
    """How per-pair logits become per-request probabilities.

    rule: one of ``RULES``.
    temperature, k_exponent: the softmax temperature for a request with K
        labels is ``T(K) = temperature * K ** k_exponent`` (must be > 0).
    content_free_premise: when set, each label's score against this premise
        (e.g. ``""`` or ``"N/A"``) is subtracted from its score against the
        document before the softmax. Computed inside the same request (K extra
        pairs), never cached.
    embedding_weight: w; when non-zero, ``w * cos(text, label)`` of the base
        encoder's sentence embeddings (`zsnli.runtime.embedding`) is added to each
        score; ``embedding_sha256`` names the embedding weights that w was
        chosen with (the server refuses other weights).
    """

    rule: str = "entailment"
    temperature: float = 1.0
    k_exponent: float = 0.0
    content_free_premise: str | None = None
    embedding_weight: float = 0.0
    embedding_sha256: str | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ScoringConfigError(f"unknown scoring rule {self.rule!r}; expected one of {RULES}")
        for name, (low, high) in VALUE_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ScoringConfigError(f"{name} must be a finite number, got {value!r}")
            if not low <= value <= high:
                raise ScoringConfigError(f"{name} must be in [{low:g}, {high:g}], got {value!r}")
        if self.content_free_premise is not None and not isinstance(self.content_free_premise, str):
            raise ScoringConfigError("content_free_premise must be a string or null")
        if self.embedding_weight != 0 and not isinstance(self.embedding_sha256, str):
            raise ScoringConfigError("embedding_weight != 0 needs embedding_sha256 (the digest of the embedding model)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ScoringConfig":
        """Build from a dict (e.g. calibration.json's ``chosen``); unknown keys are ignored.

        Raises ``ScoringConfigError`` on a non-mapping or invalid values.
        """
        if not isinstance(d, Mapping):
            raise ScoringConfigError(f"scoring config must be an object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        for name in ("temperature", "k_exponent", "embedding_weight"):
            if name in kwargs and isinstance(kwargs[name], int) and not isinstance(kwargs[name], bool):
                kwargs[name] = float(kwargs[name])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every field (inverse of ``from_dict``)."""
        return asdict(self)

    def temperature_for(self, k: int) -> float:
        """The softmax temperature for a request with ``k >= 1`` labels: ``temperature * k ** k_exponent``."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        try:
            t = float(self.temperature) * float(k) ** float(self.k_exponent)
        except ArithmeticError as exc:  # OverflowError of float ** float
            raise ValueError(f"temperature for K={k} is out of range: {exc}") from None
        if not math.isfinite(t) or t <= 0:
            raise ValueError(f"temperature for K={k} is out of range: {t!r}")
        return t


def _read_document(path: str | Path) -> Any:
    """The parsed JSON at ``path`` (any type), or None when no file is there; the one reader of calibration.json
    behind `read_chosen` and `fitted_model_sha256`. Raises ``ScoringConfigError`` (one line) when it is unreadable."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        with open(p, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScoringConfigError(f"calibration file unreadable: {p}: {one_line(exc)}") from exc


def read_chosen(path: str | Path) -> dict[str, Any] | None:
    """calibration.json's ``chosen`` object, or None when the file does not exist.

    Raises ``ScoringConfigError`` when the file exists but is unreadable or has no ``chosen`` object
    (a broken calibration must not be silently ignored).
    """
    if not Path(path).is_file():
        return None
    data = _read_document(path)
    if not isinstance(data, dict) or not isinstance(data.get("chosen"), dict):
        raise ScoringConfigError(f"calibration file has no 'chosen' object: {Path(path)}")
    return data["chosen"]


def fitted_model_sha256(path: str | Path) -> str | None:
    """The ``model_sha256`` calibration.json at ``path`` records: the digest of the model its scoring was chosen for
    (`zsnli.manifest.model_dir_digest`), None when it records none (absent or null) or the file does not exist.
    Raises ``ScoringConfigError`` (one line) when the file is unreadable or the value is not 64 lowercase hex digits."""
    data = _read_document(path)
    recorded = data.get("model_sha256") if isinstance(data, dict) else None
    if recorded is not None and not (isinstance(recorded, str) and re.fullmatch(r"[0-9a-f]{64}", recorded)):
        raise ScoringConfigError(f"calibration file {Path(path)}: model_sha256 must be a sha256 (64 hex digits) or "
                                 f"null, got {str(recorded)[:80]!r}")
    return recorded


def load_scoring_config(path: str | Path) -> tuple[ScoringConfig, bool]:
    """Read the pooled ``chosen`` scoring config from calibration.json (its groups, calibrator and cascade
    are read by `zsnli.request_scoring.load_request_scoring`).

    Returns ``(config, True)`` when the file exists, ``(ScoringConfig(), False)``
    when it does not (the caller logs a warning: entailment logit, T = 1).
    Raises ``ScoringConfigError`` when the file exists but is unreadable or has
    no valid ``chosen`` object.
    """
    chosen = read_chosen(path)
    if chosen is None:
        return ScoringConfig(), False
    try:
        return ScoringConfig.from_dict(chosen), True
    except (TypeError, ScoringConfigError) as exc:
        raise ScoringConfigError(f"calibration file {path}: invalid 'chosen': {exc}") from exc


# --------------------------------------------------------------------------- scores


def _check_finite(name: str, arr: np.ndarray) -> None:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")


def scores_from_logits(logits: np.ndarray, rule: str, entail_idx: int, contra_idx: int) -> np.ndarray:
    """One score per pair from NLI logits.

    logits: ``[N, C]`` (C = 3, or 2 for an entailment / not_entailment head) array, any float dtype.
    entail_idx, contra_idx: the entailment column and its alternative (contradiction or
    not_entailment; `zsnli.runtime.model_config.label_indices`).
    rule: one of ``RULES``.
    Returns a float64 array of shape ``[N]``. Raises ``ValueError`` on an
    unknown rule or a wrong shape. Non-finite logits pass through (callers
    check with ``label_probabilities``, which raises).
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] <= max(entail_idx, contra_idx):
        raise ValueError(f"logits must be [N, C] with C > {max(entail_idx, contra_idx)}, got {x.shape}")
    if rule == "entailment":
        return x[:, entail_idx].copy()
    if rule == "entailment_minus_contradiction":
        return x[:, entail_idx] - x[:, contra_idx]
    if rule == "entailment_logprob":
        m = x.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
        return x[:, entail_idx] - lse
    raise ValueError(f"unknown scoring rule {rule!r}; expected one of {RULES}")


#: How `aggregate_window_logits` folds the windows of one long premise into one logits row per pair.
#: ``max``: the logits of the window with the highest p(entailment) (softmax over the head's classes);
#: ``mean``: the mean of the windows' logits, column by column.
WINDOW_RULES = ("max", "mean")


def aggregate_window_logits(logits: np.ndarray, owner: np.ndarray, n_pairs: int, rule: str,
                            entail_idx: int) -> np.ndarray:
    """One logits row per (premise, hypothesis) pair from the logits of its premise windows.

    logits: ``[W, C]``, one row per (window, hypothesis); owner: int ``[W]``, the pair (``0 <= owner <
    n_pairs``) each row belongs to; every pair must own at least one row. rule: one of `WINDOW_RULES`.
    Returns float32 ``[n_pairs, C]``; a pair with one window gets that window's logits unchanged.
    Raises ``ValueError`` on an unknown rule, mismatched shapes or a pair without a window."""
    x = np.asarray(logits, dtype=np.float64)
    owner = np.asarray(owner, dtype=np.int64)
    if rule not in WINDOW_RULES:
        raise ValueError(f"unknown window rule {rule!r}; expected one of {WINDOW_RULES}")
    if x.ndim != 2 or owner.shape != (x.shape[0],):
        raise ValueError(f"logits [W, C] and owner [W] expected, got {x.shape} and {owner.shape}")
    counts = np.bincount(owner, minlength=n_pairs)
    if counts.size != n_pairs or (counts == 0).any():
        raise ValueError("every pair needs at least one window and owner must be < n_pairs")
    if rule == "mean":
        out = np.zeros((n_pairs, x.shape[1]))
        np.add.at(out, owner, x)
        return (out / counts[:, None]).astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    logp = x[:, entail_idx] - (m[:, 0] + np.log(np.exp(x - m).sum(axis=1)))
    order = np.lexsort((-logp, owner))  # by pair, best window first
    first = order[np.r_[0, np.flatnonzero(np.diff(owner[order])) + 1]]
    return x[first].astype(np.float32)


def combined_scores(
    scores: np.ndarray,
    content_free_scores: np.ndarray | None = None,
    cosine: np.ndarray | None = None,
    embedding_weight: float = 0.0,
) -> np.ndarray:
    """Per-label score before the temperature: ``scores - cf + w * cos``.

    scores: ``[K]`` (``scores_from_logits``), K >= 1; content_free_scores:
    optional ``[K]``, subtracted; cosine: ``[K]``, required when
    ``embedding_weight`` (w) is non-zero, ignored otherwise. Returns float64
    ``[K]``. Raises ``ValueError`` on an empty or non-1-D input, a shape
    mismatch, or any non-finite value. The server (`label_probabilities`)
    and calibration use this one formula.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    _check_finite("scores", s)
    if content_free_scores is not None:
        cf = np.asarray(content_free_scores, dtype=np.float64)
        if cf.shape != s.shape:
            raise ValueError(f"content_free_scores shape {cf.shape} != scores shape {s.shape}")
        _check_finite("content_free_scores", cf)
        s = s - cf
    if embedding_weight != 0:
        if cosine is None:
            raise ValueError("embedding_weight is set but no cosine similarities were given")
        cos = np.asarray(cosine, dtype=np.float64)
        if cos.shape != s.shape:
            raise ValueError(f"cosine shape {cos.shape} != scores shape {s.shape}")
        _check_finite("cosine", cos)
        s = s + embedding_weight * cos
    return s


def label_probabilities(
    scores: np.ndarray,
    config: ScoringConfig,
    content_free_scores: np.ndarray | None = None,
    cosine: np.ndarray | None = None,
) -> np.ndarray:
    """Probabilities over one request's K labels: ``softmax((scores - cf + w * cos) / T(K))``.

    scores: ``[K]`` per-label scores (``scores_from_logits``), K >= 1.
    content_free_scores: optional ``[K]`` scores of the same labels against the
        content-free premise, subtracted first.
    cosine: ``[K]`` cosine similarities of the text with each label; required
        when ``config.embedding_weight`` is non-zero, ignored otherwise.
    Returns float64 ``[K]``, each in [0, 1], summing to 1 (max-subtracted
    softmax; one label gives exactly ``[1.0]``).
    Raises ``ValueError`` on an empty or non-1-D input, a shape mismatch, or
    any non-finite value, including a temperature or scaled score that
    overflows (never an ``ArithmeticError``).
    """
    s = combined_scores(scores, content_free_scores, cosine, config.embedding_weight)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        z = s / config.temperature_for(s.size)
    _check_finite("scaled scores", z)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def multi_label_probabilities(logits: np.ndarray, entail_idx: int, contra_idx: int) -> np.ndarray:
    """Independent per-label probabilities, as transformers' zero-shot pipeline with ``multi_label=True``.

    For each pair, softmax over its (entailment, contradiction) logits (not_entailment for
    a 2-way head) and keep the entailment part: ``sigmoid(l_e - l_c)``, computed stably in float64.
    logits: ``[K, C]``. Returns float64 ``[K]`` in [0, 1] (not summing to 1).
    Raises ``ValueError`` on non-finite logits or a wrong shape.
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] <= max(entail_idx, contra_idx):
        raise ValueError(f"logits must be [K, C] with C > {max(entail_idx, contra_idx)}, got {x.shape}")
    _check_finite("logits", x)
    d = x[:, entail_idx] - x[:, contra_idx]
    out = np.empty_like(d)
    pos = d >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-d[pos]))
    ed = np.exp(d[~pos])
    out[~pos] = ed / (1.0 + ed)
    return out
