"""Two-label requests whose hypotheses are a statement and its negation, and a rule for them.

NLI cross-encoders handle "X is not toxic" badly: the negated hypothesis is
scored as a separate claim, so the two labels' scores are not complementary.
For such a request, the *negation rule* scores only the positive statement
with entailment vs contradiction (the 2-way form of transformers'
``multi_label=True`` rule), optionally corrected by the same pair on a
content-free premise and shifted by an embedding term, and gives the negation
the complement::

    d      = (l_e - l_c)(text, pos) - [(l_e - l_c)("N/A", pos)]  +  w * (cos(text, pos) - cos(text, neg))
    p(pos) = sigmoid(d / T_neg),    p(neg) = 1 - p(pos)

with its own temperature ``T_neg`` (fitted by NLL on negation-pair dev sets).

Detection (`negation_pair`, which lives in `zsnli.request_scoring` because the server reads it to put a
request in its group), documented rule:

1. exactly two hypotheses (never for one, or three and more);
2. each is lower-cased and split into words (letters, digits, apostrophes);
   contractions are expanded (``doesn't`` -> ``does not``, ``isn't`` -> ``is not``,
   ``can't``/``cannot`` -> ``can not``, ``won't`` -> ``will not``, any other ``X-n't`` -> ``X not``);
3. negation markers are the words ``not``, ``no``, ``never``, ``non``; a
   ``do``/``does``/``did`` directly before ``not`` is do-support and is dropped with it;
4. after dropping the markers, do-support and the articles ``a``/``an``/``any``,
   and cutting a final ``s`` from each word (so ``contains`` == ``contain``), the two
   word sequences must be identical, and exactly one of the hypotheses must hold markers:
   that one is the negation, the other the positive statement.

So "This example tweet is not offensive." / "This example tweet is offensive." and
"... does not contain hate speech." / "... contains hate speech." are pairs, while
"positive sentiment" / "negative sentiment" is not.

Imports: numpy, ``zsnli.scoring`` (``scores_from_logits``) and ``zsnli.request_scoring`` (the detection) only.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..request_scoring import NEGATION_MARKERS, negation_pair
from ..scoring import scores_from_logits

__all__ = ["NEGATION_MARKERS", "NegationRule", "negation_pair", "pair_difference", "negation_probabilities"]

@dataclass(frozen=True)
class NegationRule:
    """Parameters of the negation rule (see module docstring).

    temperature: T_neg > 0; content_free: subtract the "N/A" pair's (l_e - l_c);
    embedding_weight: w on ``cos(text, pos) - cos(text, neg)``.
    """

    temperature: float = 1.0
    content_free: bool = False
    embedding_weight: float = 0.0


def pair_difference(logits_pos: np.ndarray, entail_idx: int, contra_idx: int, cf_logits_pos: np.ndarray | None = None,
                    cos_pos: np.ndarray | None = None, cos_neg: np.ndarray | None = None,
                    embedding_weight: float = 0.0) -> np.ndarray:
    """The pre-temperature score ``d`` of the positive statement for N requests.

    logits_pos: ``[N, C]`` NLI logits of (text, positive hypothesis); cf_logits_pos:
    optional ``[N, C]`` logits of (content-free premise, positive hypothesis);
    cos_pos, cos_neg: ``[N]`` cosines, needed when ``embedding_weight`` != 0.
    Returns float64 ``[N]``. Raises ``ValueError`` on shape mismatches.
    """
    d = scores_from_logits(logits_pos, "entailment_minus_contradiction", entail_idx, contra_idx)
    if cf_logits_pos is not None:
        d = d - scores_from_logits(cf_logits_pos, "entailment_minus_contradiction", entail_idx, contra_idx)
    if embedding_weight:
        if cos_pos is None or cos_neg is None:
            raise ValueError("embedding_weight is set but cosines were not given")
        d = d + embedding_weight * (np.asarray(cos_pos, dtype=np.float64) - np.asarray(cos_neg, dtype=np.float64))
    return d


def negation_probabilities(d: np.ndarray, temperature: float) -> np.ndarray:
    """``[N, 2]`` probabilities (column 0: positive statement, 1: negation) = (sigmoid(d/T), 1 - sigmoid(d/T)).

    Computed stably in float64. Raises ``ValueError`` when ``temperature <= 0`` or ``d`` is not finite.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    z = np.asarray(d, dtype=np.float64) / temperature
    if not np.all(np.isfinite(z)):
        raise ValueError("scores contain non-finite values")
    p = np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
    return np.stack([p, 1.0 - p], axis=1)
