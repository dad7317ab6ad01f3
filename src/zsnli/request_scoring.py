"""How one request is scored: its group, the group's scoring, the confidence calibrator and the label cascade.

`zsnli.scoring` turns one request's per-label scores into probabilities with one `ScoringConfig`. This
module decides, from the request alone (stateless), which configuration applies and at which temperature:

* **Request groups** (`request_group`), read from the hypotheses only: ``negation`` (two hypotheses that
  are a statement and its negation, `negation_pair`), ``binary`` (two other hypotheses, e.g. positive vs
  negative), ``few`` (3 to `FEW_MAX_LABELS` labels) and ``many`` (more). One label has no group (its
  probability is 1). Each group may have its own rule and embedding weight (`RequestScoring.groups`);
  a group without its own entry uses the pooled ``default``.
* **Confidence calibrator** (`Calibrator`): a second, per-request factor on the group's temperature,
  ``T = T_group(K) x exp(theta . phi)``, from features ``phi`` of the request's own probabilities at
  ``T_group(K)`` (`calibrator_features`: label count, the group, the top-1 probability, the top-1 minus
  top-2 margin, the normalised entropy, whether the NLI and cosine terms agree on the top label, the
  premise length in tokens). theta = 0 is the group's temperature unchanged. A temperature scales every
  score of the request alike, so the arg-max (the predicted label) never changes; only the confidence does. The form follows the inverse-temperature
  heads of GLiClass's calibration module (temperature from log K, margin and entropy) and the per-sample
  temperature of Top-versus-All calibration (Le Coz et al., NeurIPS 2024); the coefficients are fitted
  out of fold by `zsnli.selection.grouped`.
* **Label cascade** (`Cascade`): for a request with at least ``min_labels`` labels, the cosine term ranks
  all K labels and only the top ``keep`` are scored by the cross-encoder; a pruned label's NLI score is
  the lowest NLI score of the scored ones (`cascade_scores`), so its combined score is that floor plus its
  own cosine term and the K probabilities stay one distribution under the same temperature.

All of it lives in calibration.json's ``chosen`` object (``groups``, ``calibrator``, ``cascade``; absent
keys mean "not used", so an older calibration.json is served exactly as before) and is read by
`RequestScoring.from_chosen`.

* **The scorings a request may ask for** (`SCORINGS`, `scoring_named`): ``served`` (the one above),
  ``pipeline`` (`PIPELINE_SCORING`: the transformers zero-shot pipeline's own, entailment logit at T = 1)
  and ``embedding`` (`embedding_scoring`: the sentence encoder's cosine alone, softmax(20 cos / T(K)), no
  cross-encoder pair). The embedding scoring is the label cascade's limit: a `Cascade` that keeps no label
  (`EMBEDDING_CASCADE`), so every label's NLI term is the same constant and only ``20 x cos`` remains; the
  server runs it through the same steps and batcher as a cascade (the cosines first, then no pairs). Its
  T(K) is calibration.json's top-level ``embedding_scoring`` object (`load_embedding_scoring`), chosen out of
  fold by `zsnli.selection.grouped_doc.embedding_row`.

May import: numpy, the standard library and ``zsnli.scoring``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .scoring import ScoringConfig, ScoringConfigError, combined_scores, read_chosen

__all__ = ["GROUPS", "FEW_MAX_LABELS", "CALIBRATOR_FEATURES", "negation_pair", "request_group",
           "calibrator_features", "Calibrator", "Cascade", "cascade_scores", "RequestScoring",
           "load_request_scoring", "SCORINGS", "PIPELINE_SCORING", "EMBEDDING_CASCADE", "embedding_scoring",
           "load_embedding_scoring", "scoring_named", "ScoringUnavailable"]

GROUPS = ("negation", "binary", "few", "many")
FEW_MAX_LABELS = 9
"""The largest K of the ``few`` group (issue 30: 3-9 labels; 10 or more is ``many``)."""

CALIBRATOR_FEATURES = ("bias", "log_k", "negation", "binary", "many", "top1", "margin", "entropy", "agree",
                       "log_tokens")
"""Features of `calibrator_features`, in order. ``top1``, ``margin`` (top-1 minus top-2) and ``entropy``
(divided by log K, so in [0, 1]) are of the probabilities at the group's temperature; ``agree`` is 1 when
the top label by the NLI score is the top label by the cosine (0 without a cosine term); ``log_tokens`` is
log(1 + premise tokens)."""

LOG_T_RANGE = (math.log(1e-3), math.log(1e3))
"""The calibrator's temperature is clipped to [1e-3, 1e3], the range `zsnli.scoring.VALUE_RANGES` allows for t0."""

# --------------------------------------------------------------------------- statement / negation pairs

NEGATION_MARKERS = frozenset({"not", "no", "never", "non"})
_DO_SUPPORT = frozenset({"do", "does", "did"})
_ARTICLES = frozenset({"a", "an", "any"})
_IRREGULAR = {"can't": "can not", "cannot": "can not", "won't": "will not", "shan't": "shall not", "ain't": "is not"}
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(text.lower().replace("\u2019", "'")):
        word = _IRREGULAR.get(word, word)
        if word.endswith("n't") and " " not in word:
            word = word[:-3] + " not"
        out.extend(word.split())
    return out


def _core(words: list[str]) -> tuple[tuple[str, ...], int]:
    """(the words without markers/do-support/articles, lightly stemmed; number of markers)."""
    kept: list[str] = []
    markers = 0
    for i, w in enumerate(words):
        if w in NEGATION_MARKERS:
            markers += 1
            continue
        if w in _DO_SUPPORT and i + 1 < len(words) and words[i + 1] == "not":
            continue
        if w in _ARTICLES:
            continue
        kept.append(w[:-1] if len(w) > 3 and w.endswith("s") else w)
    return tuple(kept), markers


def negation_pair(hypotheses: Sequence[str]) -> tuple[int, int] | None:
    """``(positive_index, negation_index)`` when the hypotheses are a statement and its negation, else None.

    hypotheses: the request's label descriptions (after any template). Always None unless there are exactly
    two. Rule: each is lower-cased and split into words (letters, digits, apostrophes; contractions expanded:
    ``doesn't`` -> ``does not``, ``can't``/``cannot`` -> ``can not``, ``won't`` -> ``will not``); the words
    ``not``/``no``/``never``/``non`` are negation markers, a ``do``/``does``/``did`` right before ``not`` is
    do-support; without markers, do-support and the articles ``a``/``an``/``any``, and with a final ``s`` cut
    from each word, the two word sequences must be equal and exactly one hypothesis must hold markers (the
    negation). "This tweet is not offensive." / "This tweet is offensive." is a pair; "positive sentiment" /
    "negative sentiment" is not.
    """
    if len(hypotheses) != 2:
        return None
    (core0, m0), (core1, m1) = (_core(_words(h)) for h in hypotheses)
    if core0 != core1 or not core0 or (m0 > 0) == (m1 > 0):
        return None
    return (1, 0) if m0 > 0 else (0, 1)


def request_group(hypotheses: Sequence[str], multi_label: bool = False) -> str | None:
    """The group of a request with these hypotheses (after the template): one of `GROUPS`, None for K <= 1
    and for a multi-label request (scored label by label, it has no group). The one definition the server,
    the selection and the bench use.

    K = 2: ``negation`` when `negation_pair` finds a statement and its negation, else ``binary``;
    3 <= K <= `FEW_MAX_LABELS`: ``few``; more: ``many``. K counts the hypotheses sent, duplicates included.
    """
    k = len(hypotheses)
    if k <= 1 or multi_label:
        return None
    if k == 2:
        return "negation" if negation_pair(hypotheses) is not None else "binary"
    return "few" if k <= FEW_MAX_LABELS else "many"


# --------------------------------------------------------------------------- calibrator


def calibrator_features(scores: np.ndarray, nli_scores: np.ndarray, cosine: np.ndarray | None,
                        group: str | None, premise_tokens: int) -> np.ndarray:
    """float64 ``[len(CALIBRATOR_FEATURES)]`` features of one request (see `CALIBRATOR_FEATURES`).

    scores: ``[K]`` combined scores divided by the group's temperature T_group(K), K >= 2;
    nli_scores: ``[K]`` the NLI term alone (the rule's scores); cosine: ``[K]`` or None;
    group: `request_group` of the request; premise_tokens: the premise's tokens after truncation (>= 0).
    Raises ``ValueError`` for K < 2, mismatched shapes or an unknown group.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size < 2:
        raise ValueError(f"calibrator features need K >= 2 scores, got shape {s.shape}")
    if np.shape(nli_scores) != s.shape or (cosine is not None and np.shape(cosine) != s.shape):
        raise ValueError("scores, nli_scores and cosine must have the same shape")
    if group not in GROUPS:
        raise ValueError(f"unknown request group {group!r}; expected one of {GROUPS}")
    e = np.exp(s - s.max())
    p = e / e.sum()
    top2 = np.partition(p, -2)[-2:]
    entropy = float(-(p * np.log(np.maximum(p, 1e-300))).sum() / math.log(s.size))
    agree = 0.0 if cosine is None else float(int(np.argmax(nli_scores)) == int(np.argmax(cosine)))
    return np.array([1.0, math.log(s.size), float(group == "negation"), float(group == "binary"),
                     float(group == "many"), float(top2[1]), float(top2[1] - top2[0]), entropy, agree,
                     math.log1p(max(int(premise_tokens), 0))])


@dataclass(frozen=True)
class Calibrator:
    """Per-request temperature factor ``exp(clip(theta . phi))`` on T_group(K) (see the module docstring).

    features: names, a prefix-free subset of `CALIBRATOR_FEATURES` in any order; coefficients: theta, one
    per feature; fitted_by: how theta was fitted (``nll`` or ``top_label``, informative only).
    Raises ``ScoringConfigError`` on unknown features, a length mismatch or non-finite coefficients.
    """

    features: tuple[str, ...]
    coefficients: tuple[float, ...]
    fitted_by: str = "nll"

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in CALIBRATOR_FEATURES]
        if unknown:
            raise ScoringConfigError(f"calibrator: unknown features {unknown}; known: {CALIBRATOR_FEATURES}")
        if len(self.features) != len(self.coefficients) or len(set(self.features)) != len(self.features):
            raise ScoringConfigError("calibrator: one coefficient per distinct feature is needed")
        if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                   for c in self.coefficients):
            raise ScoringConfigError("calibrator: coefficients must be finite numbers")

    @property
    def _index(self) -> list[int]:
        return [CALIBRATOR_FEATURES.index(f) for f in self.features]

    def log_temperature(self, phi: np.ndarray) -> np.ndarray:
        """log of the temperature factor for feature rows ``phi`` ``[..., len(CALIBRATOR_FEATURES)]`` (all
        features), clipped to `LOG_T_RANGE`."""
        x = np.asarray(phi, dtype=np.float64)[..., self._index]
        return np.clip(x @ np.asarray(self.coefficients, dtype=np.float64), *LOG_T_RANGE)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (calibration.json's ``chosen.calibrator``)."""
        return {"features": list(self.features), "coefficients": [float(c) for c in self.coefficients],
                "fitted_by": self.fitted_by,
                "form": "T = T_group(K) * exp(clip(sum(coefficients * features), log 1e-3, log 1e3))"}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Calibrator":
        """Inverse of `to_dict`; raises ``ScoringConfigError`` on a malformed object."""
        if not isinstance(d, Mapping) or not isinstance(d.get("features"), list) \
                or not isinstance(d.get("coefficients"), list):
            raise ScoringConfigError("calibrator must be an object with 'features' and 'coefficients' lists")
        return cls(tuple(str(f) for f in d["features"]), tuple(d["coefficients"]), str(d.get("fitted_by", "nll")))


# --------------------------------------------------------------------------- cascade


@dataclass(frozen=True)
class Cascade:
    """Send only the ``keep`` labels ranked highest by the cosine to the cross-encoder when K >= ``min_labels``.

    ``keep = 0`` sends none: the cosine alone scores the labels (`EMBEDDING_CASCADE`, the ``embedding``
    scoring). Raises ``ScoringConfigError`` unless 2 <= keep < min_labels <= 4096, or keep = 0 and
    1 <= min_labels <= 4096.
    """

    min_labels: int
    keep: int

    def __post_init__(self) -> None:
        for name in ("min_labels", "keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ScoringConfigError(f"cascade.{name} must be an integer, got {value!r}")
        if not (2 <= self.keep < self.min_labels <= 4096 or (self.keep == 0 and 1 <= self.min_labels <= 4096)):
            raise ScoringConfigError(f"cascade needs 2 <= keep < min_labels <= 4096 (or keep = 0: the cosine alone), "
                                     f"got keep={self.keep}, min_labels={self.min_labels}")

    def applies(self, k: int) -> bool:
        """True when a request with ``k`` distinct hypotheses is pruned."""
        return k >= self.min_labels

    def kept(self, cosine: np.ndarray) -> np.ndarray:
        """Sorted int indices ``[keep]`` of the labels with the highest cosines (ties: the lower index first;
        empty for keep = 0).

        cosine: ``[K]`` with K >= min_labels. Raises ``ValueError`` for a shorter or non-1-D array.
        """
        c = np.asarray(cosine, dtype=np.float64)
        if c.ndim != 1 or not self.applies(c.size):
            raise ValueError(f"cascade applies to K >= {self.min_labels} labels, got shape {c.shape}")
        order = np.lexsort((np.arange(c.size), -c))  # primary key -cosine, then index: deterministic
        return np.sort(order[: self.keep])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (calibration.json's ``chosen.cascade``)."""
        return {"min_labels": self.min_labels, "keep": self.keep}


def prunes(cascade: Cascade | None, config: ScoringConfig, k: int, multi_label: bool = False) -> bool:
    """Whether the label cascade prunes a request: the one rule of the server (`zsnli.serving.service`), the
    selection (`zsnli.selection.grouped`) and the bench (`zsnli.bench.side_by_side`).

    True when a ``cascade`` is set, the request is single-label (a multi-label request scores every label
    on its own), its group's ``config`` has a cosine term to rank the labels (``embedding_weight`` != 0)
    and no content-free premise (that correction needs every label's NLI score), and it has ``k`` >=
    ``cascade.min_labels`` distinct hypotheses (`Cascade.applies`).
    """
    return (cascade is not None and not multi_label and config.embedding_weight != 0
            and config.content_free_premise is None and cascade.applies(k))


def cascade_scores(nli_kept: np.ndarray, kept: np.ndarray, k: int) -> np.ndarray:
    """``[k]`` NLI scores: the scored labels' own, every pruned label the lowest of them (0 for every label
    when none was scored, M = 0: the embedding scoring, where the cosine alone decides).

    nli_kept: ``[M]`` rule scores of the labels at ``kept`` (sorted int indices into ``range(k)``).
    """
    floor = float(np.min(nli_kept)) if np.size(nli_kept) else 0.0
    out = np.full(k, floor, dtype=np.float64)
    out[np.asarray(kept, dtype=np.int64)] = np.asarray(nli_kept, dtype=np.float64)
    return out


# --------------------------------------------------------------------------- the served scoring


@dataclass(frozen=True)
class RequestScoring:
    """The served single-label scoring: a pooled `ScoringConfig`, per-group overrides, calibrator, cascade.

    default: the pooled config (calibration.json's ``chosen`` fields); groups: group -> `ScoringConfig`
    (temperature used only without a calibrator); calibrator, cascade: optional.
    """

    default: ScoringConfig = field(default_factory=ScoringConfig)
    groups: Mapping[str, ScoringConfig] = field(default_factory=dict)
    calibrator: Calibrator | None = None
    cascade: Cascade | None = None

    def __post_init__(self) -> None:
        bad = [g for g in self.groups if g not in GROUPS]
        if bad:
            raise ScoringConfigError(f"unknown request groups {bad}; expected some of {GROUPS}")
        digests = {c.embedding_sha256 for c in self.configs() if c.embedding_weight != 0}
        if len(digests) > 1:
            raise ScoringConfigError("every group with a cosine term must name the same embedding_sha256")
        if self.cascade is not None and not digests:
            raise ScoringConfigError("cascade needs a cosine term (embedding_weight != 0) to rank the labels")
        if any(c.content_free_premise is not None for c in self.groups.values()):
            raise ScoringConfigError("per-group scoring does not support a content-free premise")

    @property
    def needs_encoder(self) -> bool:
        """True when some group (or the default) has a cosine term: the sentence encoder must be loaded."""
        return any(c.embedding_weight != 0 for c in self.configs())

    def configs(self) -> list[ScoringConfig]:
        """The default config and every group's."""
        return [self.default, *self.groups.values()]

    def config_for(self, group: str | None) -> ScoringConfig:
        """The `ScoringConfig` of a request group (the default for None or a group without its own)."""
        return self.groups.get(group, self.default) if group is not None else self.default

    def pruning(self, hypotheses: Sequence[str], multi_label: bool = False) -> Cascade | None:
        """The cascade when it prunes a request with these hypotheses (`request_group` then `prunes`, K the
        distinct hypotheses), else None."""
        config = self.config_for(request_group(hypotheses, multi_label))
        return self.cascade if prunes(self.cascade, config, len(set(hypotheses)), multi_label) else None

    @property
    def embedding_sha256(self) -> str | None:
        """The digest of the sentence encoder the cosine terms were fitted with (None without a cosine term)."""
        return next((c.embedding_sha256 for c in self.configs() if c.embedding_weight != 0), None)

    @property
    def content_free_premise(self) -> str | None:
        """The default config's content-free premise (groups never have one)."""
        return self.default.content_free_premise

    def temperature(self, config: ScoringConfig, scores: np.ndarray, nli_scores: np.ndarray,
                    cosine: np.ndarray | None, group: str | None, premise_tokens: int) -> float:
        """The request's temperature: ``config``'s T(K), times the calibrator's factor when there is one (K >= 2)."""
        k = int(np.size(scores))
        base = config.temperature_for(k)
        if self.calibrator is None or k < 2:
            return base
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            z = np.asarray(scores, dtype=np.float64) / base
        if not np.all(np.isfinite(z)):
            raise ValueError("scaled scores contain non-finite values")
        phi = calibrator_features(z, nli_scores, cosine if config.embedding_weight else None, group, premise_tokens)
        return base * float(math.exp(float(self.calibrator.log_temperature(phi))))

    def probabilities(self, nli_scores: np.ndarray, hypotheses: Sequence[str], cosine: np.ndarray | None = None,
                      content_free_scores: np.ndarray | None = None, premise_tokens: int = 0) -> np.ndarray:
        """Probabilities ``[K]`` of one single-label request, K = len(hypotheses) (duplicates included).

        nli_scores: ``[K]`` the group config's rule scores (`zsnli.scoring.scores_from_logits`; a cascade's
        pruned labels already filled by `cascade_scores`); cosine: ``[K]`` when the group has a cosine term;
        content_free_scores: ``[K]`` when the default has a content-free premise and the group is the default.
        Raises ``ValueError`` on shapes, non-finite values or an out-of-range temperature.
        """
        group = request_group(hypotheses)
        config = self.config_for(group)
        cf = content_free_scores if config.content_free_premise is not None else None
        s = combined_scores(nli_scores, cf, cosine, config.embedding_weight)
        if s.size != len(hypotheses):
            raise ValueError(f"{s.size} scores for {len(hypotheses)} hypotheses")
        t = self.temperature(config, s, np.asarray(nli_scores, dtype=np.float64), cosine, group, premise_tokens)
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            z = s / t
        if not np.all(np.isfinite(z)):
            raise ValueError("scaled scores contain non-finite values")
        e = np.exp(z - z.max())
        return e / e.sum()

    def to_dict(self) -> dict[str, Any]:
        """The default config's fields plus ``groups``, ``calibrator`` and ``cascade`` (what `/health` shows)."""
        out = self.default.to_dict()
        out["groups"] = {g: c.to_dict() for g, c in self.groups.items()}
        out["calibrator"] = self.calibrator.to_dict() if self.calibrator is not None else None
        out["cascade"] = self.cascade.to_dict() if self.cascade is not None else None
        return out

    @classmethod
    def from_chosen(cls, chosen: Mapping[str, Any]) -> "RequestScoring":
        """From calibration.json's ``chosen``: its `ScoringConfig` fields, and optional ``groups`` (group ->
        config fields), ``calibrator`` (`Calibrator.to_dict`'s form) and ``cascade`` (``min_labels``, ``keep``).
        Raises ``ScoringConfigError`` on any invalid part."""
        if not isinstance(chosen, Mapping):
            raise ScoringConfigError(f"scoring config must be an object, got {type(chosen).__name__}")
        groups = chosen.get("groups") or {}
        if not isinstance(groups, Mapping):
            raise ScoringConfigError("'groups' must be an object of group -> scoring config")
        try:
            cal = chosen.get("calibrator")
            casc = chosen.get("cascade")
            if casc is not None and not isinstance(casc, Mapping):
                raise ScoringConfigError("'cascade' must be an object with min_labels and keep")
            return cls(ScoringConfig.from_dict(chosen), {str(g): ScoringConfig.from_dict(c) for g, c in groups.items()},
                       Calibrator.from_dict(cal) if cal is not None else None,
                       Cascade(casc.get("min_labels"), casc.get("keep")) if casc is not None else None)
        except TypeError as exc:
            raise ScoringConfigError(f"invalid scoring config: {exc}") from None


def load_request_scoring(path: str | Path) -> tuple[RequestScoring, bool]:
    """The served scoring from calibration.json: ``(RequestScoring, True)``, or ``(RequestScoring(), False)``
    when the file does not exist (the pipeline's scoring: entailment logit, T = 1).

    Raises ``ScoringConfigError`` (one line naming the file) when it exists but is unreadable or invalid.
    """
    chosen = read_chosen(path)
    if chosen is None:
        return RequestScoring(), False
    try:
        return RequestScoring.from_chosen(chosen), True
    except ScoringConfigError as exc:
        raise ScoringConfigError(f"calibration file {path}: invalid 'chosen': {exc}") from None


# --------------------------------------------------------------------------- the scorings a request may ask for

SCORINGS = ("served", "pipeline", "embedding")
"""A request's ``scoring`` values (`scoring_named`); ``ZSNLI_SCORING`` picks the server's default among them."""

PIPELINE_SCORING = RequestScoring()
"""``scoring: "pipeline"``: the transformers pipeline's (entailment logit, T = 1, nothing else)."""

EMBEDDING_WEIGHT = 20.0
"""The embedding scoring's score is ``20 x cos``: T = 1 is the embedding-similarity baseline softmax(20 x cos)
(`zsnli.compare.arms.baselines.DEFAULT_EMBEDDING_SCALE`), the fitted T inside `zsnli.selection.fits.LOG_T0_GRID`."""

EMBEDDING_CASCADE = Cascade(min_labels=1, keep=0)
"""The cascade of the ``embedding`` scoring: every request (K >= 1) keeps no label for the cross-encoder."""

EMBEDDING_SCORING_KEY = "embedding_scoring"  # calibration.json's object of the fast path's T(K)


class ScoringUnavailable(ValueError):
    """A request asked for a scoring this server cannot serve (unknown name, or no fitted embedding scoring)."""


def embedding_scoring(temperature: float, k_exponent: float, embedding_sha256: str) -> RequestScoring:
    """The ``embedding`` scoring: probabilities ``softmax(20 cos(text, label) / T(K))``, T(K) = temperature x
    K ** k_exponent, the cosines of the sentence encoder whose digest is ``embedding_sha256``.

    Built as the served formula with weight `EMBEDDING_WEIGHT` on the cosine and `EMBEDDING_CASCADE` (no NLI
    pair: every label's NLI term is the same 0, `cascade_scores`). Raises ``ScoringConfigError`` on values outside
    `zsnli.scoring.VALUE_RANGES`."""
    config = ScoringConfig(rule="entailment", temperature=float(temperature), k_exponent=float(k_exponent),
                           embedding_weight=EMBEDDING_WEIGHT, embedding_sha256=embedding_sha256)
    return RequestScoring(config, {}, None, EMBEDDING_CASCADE)


def load_embedding_scoring(path: str | Path) -> RequestScoring | None:
    """The ``embedding`` scoring of calibration.json (its top-level ``embedding_scoring`` object:
    ``temperature``, ``k_exponent``, ``embedding_sha256``), or None when the file or the object is absent.

    Raises ``ScoringConfigError`` (one line naming the file) on an unreadable file or a malformed object."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        row = json.loads(p.read_text(encoding="utf-8")).get(EMBEDDING_SCORING_KEY)
    except (OSError, ValueError, AttributeError) as exc:
        raise ScoringConfigError(f"calibration file unreadable: {p}: {exc}") from None
    if row is None:
        return None
    try:
        if not isinstance(row, Mapping) or not isinstance(row.get("embedding_sha256"), str):
            raise ScoringConfigError("must be an object with temperature, k_exponent and embedding_sha256")
        return embedding_scoring(row.get("temperature"), row.get("k_exponent", 0.0), row["embedding_sha256"])
    except (TypeError, ValueError) as exc:
        raise ScoringConfigError(f"calibration file {p}: invalid {EMBEDDING_SCORING_KEY!r}: {exc}") from None


def scoring_named(name: str, served: RequestScoring, embedding: RequestScoring | None) -> RequestScoring:
    """The `RequestScoring` of a request's ``scoring``: ``served`` -> ``served`` (calibration.json's
    ``chosen``), ``pipeline`` -> `PIPELINE_SCORING`, ``embedding`` -> ``embedding`` (`load_embedding_scoring`).

    Raises ``ScoringUnavailable`` (its message starts with ``scoring:``) for a name not in `SCORINGS`, and
    for ``embedding`` when ``embedding`` is None (no fitted embedding scoring in calibration.json)."""
    if name in ("served", "pipeline"):
        return served if name == "served" else PIPELINE_SCORING
    if name == "embedding":
        if embedding is None:
            raise ScoringUnavailable("scoring: 'embedding' is not available on this server: its calibration.json "
                                     f"has no {EMBEDDING_SCORING_KEY!r} object (train.py select writes one)")
        return embedding
    raise ScoringUnavailable(f"scoring: must be one of {', '.join(repr(s) for s in SCORINGS)}, got {name!r}")
