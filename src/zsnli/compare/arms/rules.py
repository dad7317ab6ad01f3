"""The ``keyword_rules`` arm: the hand-written triage rules every team starts from, as a bake-off floor.

A rule is (label, keyword). The rules are tried in order; the first whose keyword occurs in the text (case
folded, on word boundaries, so ``"card"`` does not fire on ``"discarded"``) decides, at probability 1.0 for its
label. A text no rule matches goes to the busiest class of the training rows: it gets their class
frequencies (as the ``majority`` arm), so its top label is the busiest class.

The rules come from the suite (``rules = {label = ["keyword", ...], ...}``: labels in the order written, each
label's keywords in order) or, when none are given, are derived from each fit's training rows: per label the
``keywords_per_label`` words that are most distinctive of it (see `derive_rules`).

Imports numpy, scikit-learn (its English stop-word list), `zsnli.compare.arms.base` and the few-shot arms'
shared bookkeeping (`zsnli.compare.arms.few_shot`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

import numpy as np

from zsnli.compare.arms.base import ArmError, register
from zsnli.compare.arms.few_shot import MajorityArm

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The case-folded word tokens (``\\w+``) of ``text``."""
    return WORD.findall(text.casefold())


def derive_rules(texts: Sequence[str], labels: Sequence[str], per_label: int = 3,
                 min_precision: float = 0.5) -> list[tuple[str, str]]:
    """Rules ``[(label, keyword)]`` read off labelled rows, in the order they are tried.

    A word's *precision* for a label is the share of the rows containing it that carry that label; its
    *support* the number of those rows. Each label keeps its ``per_label`` words of highest (precision,
    support) with precision >= ``min_precision`` (English stop words and digits-only tokens excluded);
    all kept rules are then ordered by precision, support, label and word (highest first, names
    alphabetically), so the surest rule fires first. Deterministic. Raises ``ValueError`` when the lists
    differ in length.
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    rows_with: Counter[str] = Counter()
    rows_with_label: Counter[tuple[str, str]] = Counter()
    for text, label in zip(texts, labels):
        for w in set(words(text)):
            if w in ENGLISH_STOP_WORDS or w.isdigit():
                continue
            rows_with[w] += 1
            rows_with_label[(label, w)] += 1
    scored = []
    for (label, w), n in rows_with_label.items():
        precision = n / rows_with[w]
        if precision >= min_precision:
            scored.append((-precision, -n, label, w))
    kept: list[tuple[float, int, str, str]] = []
    for label in sorted(set(labels)):
        kept += sorted(s for s in scored if s[2] == label)[:per_label]
    return [(label, w) for _, _, label, w in sorted(kept)]


@register("keyword_rules")
class KeywordRulesArm(MajorityArm):
    """First matching keyword rule at probability 1.0, else the training rows' class frequencies (module docstring).

    rules: label -> keywords, in order (from the suite); None: `derive_rules` on each fit's training rows
    (``keywords_per_label`` per label). Rules whose label is not among a document's candidate labels are
    skipped for that document.
    """

    def __init__(self, name: str | None = None, rules: dict[str, list[str]] | None = None,
                 keywords_per_label: int = 3) -> None:
        super().__init__(name)
        if rules is not None:
            if not isinstance(rules, dict) or not rules or not all(
                    isinstance(k, list) and k and all(isinstance(w, str) and w.strip() for w in k) for k in rules.values()):
                raise ArmError(f"{self.name}: rules must map each label to a non-empty list of keywords "
                               '(rules = {billing = ["invoice", "refund"], ...})')
        if keywords_per_label < 1:
            raise ArmError(f"{self.name}: need keywords_per_label >= 1")
        self.params = {"rules": rules, "keywords_per_label": keywords_per_label}
        self.rules_: list[tuple[str, str]] = [(label, w) for label, kws in (rules or {}).items() for w in kws]
        self._patterns: list[tuple[str, re.Pattern]] = []

    def check_labels(self, labels: set[str]) -> None:
        """Refuse (``ArmError``) suite rules for a label that no example has: such a rule could never fire
        (rules match candidate labels exactly), so it is a typo or rules written for other data."""
        unknown = [label for label in (self.params["rules"] or {}) if label not in labels]
        if unknown:
            shown = ", ".join(sorted(labels)[:20]) + (", ..." if len(labels) > 20 else "")
            raise ArmError(f"{self.name}: rules name label(s) {', '.join(map(repr, unknown))} that no example has "
                           f"(rules match a label exactly); the examples' labels: {shown}")

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        super().fit(texts, labels)
        if self.params["rules"] is None:
            self.rules_ = derive_rules(texts, labels, self.params["keywords_per_label"])
        self._patterns = [(label, re.compile(r"(?<!\w)" + re.escape(w.casefold().strip()) + r"(?!\w)"))
                          for label, w in self.rules_]

    def fired(self, text: str, labels: Sequence[str]) -> tuple[str, str] | None:
        """The first rule ``(label, keyword)`` that fires on ``text`` among ``labels``, or None."""
        folded = text.casefold()
        for (label, pattern), rule in zip(self._patterns, self.rules_):
            if label in labels and pattern.search(folded):
                return rule
        return None

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        out = super().predict_proba(texts, labels)
        for i, text in enumerate(texts):
            rule = self.fired(text, labels)
            if rule is not None:
                out[i] = 0.0
                out[i, list(labels).index(rule[0])] = 1.0
        return out

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        ident["rules_source"] = "suite" if self.params["rules"] is not None else "derived from each fit's training rows"
        return ident
