"""A bake-off's plan against its time budget, before any arm runs: each arm's seconds estimated from the plan.

Every front end checks its plan here first: ``POST /v1/bakeoff`` against ``ZSNLI_BAKEOFF_TIME_BUDGET_S`` (a 422
naming the arms to drop) and ``validate.py bakeoff --time-budget-s`` (one line, exit 2). An arm's estimate is a
linear cost model of the plan's shape (`PlanShape`: examples scored, fits, training characters per fit, labels,
characters per text and per label description) with the coefficients of its kind (`COSTS`, `KIND_OF`):

* ``nli``: the cross-encoder arms (``served``, ``pipeline``): per example one forward of its (text, label) pairs,
  each pair cut to the model's window: ``n x (doc_s + pairs x pair_token_s x min(window, text tokens + label
  tokens + 3))``, tokens counted by `token_bound` (not characters: text that splits into many tokens, CJK or
  punctuation-dense, costs up to one token per character); pairs = K, or what the served scoring's label
  cascade keeps (`nli_pairs`), and a served scoring with a cosine term adds one sentence-encoder pass per text;
* ``encoder``: the sentence encoder, per text ``doc_s + token_s x min(encoder window, tokens + 2)``: the
  embedding arms embed every example (the service embeds them once for all of them: ``shared_encoder``, the
  `SHARED_EMBEDDING` line) and the label descriptions;
* ``fitted``: scikit-learn arms, ``fits x (fit_s + fit_unit_s x training characters per fit x K) + n x (doc_s +
  doc_char_s x characters)``;
* ``finetuned_encoder``: its own bound, ``fits x max_fit_s``, plus the encoder's passes.

An arm type without coefficients (registered by a suite's ``imports``) has no estimate and is named as such; the
check then counts only the arms it knows. The coefficients were measured by ``python -m zsnli.bench.bakeoff_costs``
on the machine and load docs/bakeoff.md names (a 2-core AMD EPYC shared with a training run); a faster or quieter
machine does the work sooner, so the check refuses only plans that would overrun there, and an arm that still
overruns at run time is reported as not finished, never hidden (`zsnli.compare.render.winner_line`).

Imports the standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

CHARS_PER_TOKEN = 4.0
"""Characters per WordPiece token of English text (about 4; an estimate is all this needs)."""

NLI_WINDOW = 512
"""The served model's window when the caller does not know it (``ZSNLI_MAX_LENGTH``'s default)."""
ENCODER_WINDOW = 256
"""The sentence encoder's window (all-MiniLM-L6-v2's 256 tokens)."""

_WORDS = re.compile(r"\S+")


def token_bound(text: str) -> float:
    """A conservative count of the subword tokens of ``text`` for the served tokenizers (WordPiece,
    SentencePiece), never fewer than they give on the bake-off tryout's texts: a whitespace-separated word of ASCII
    letters and digits alone counts ``max(1, length / CHARS_PER_TOKEN)`` tokens; every character of any other
    word (one holding punctuation, ``_``, CJK or other non-ASCII characters) one token, since tokenizers cut
    text outside their vocabulary into pieces down to single characters. English prose counts about 1.2 tokens
    a word, a sentence's last word about its length; ``word_word_...``, ``a!a!...``, ``ab_ab_...`` and CJK text
    one token per character, where characters / 4 counted a quarter of that (the tryout's fault: a CJK plan
    passed the budget check and overran). An upper bound to refuse on, not a tokenizer: it counts
    ``word_`` text about twice as long as it runs."""
    total = 0.0
    for word in _WORDS.findall(text):
        total += max(1.0, len(word) / CHARS_PER_TOKEN) if word.isascii() and word.isalnum() else len(word)
    return total


SHARED_EMBEDDING = "(embedding the examples)"
"""The estimate's line for the service's one pass of the sentence encoder over every example, shared by its
embedding arms."""


@dataclass(frozen=True)
class Cost:
    """Coefficients of one kind of arm (seconds; see the module docstring for the formulas)."""

    setup_s: float = 0.0
    doc_s: float = 0.0
    doc_char_s: float = 0.0
    pair_token_s: float = 0.0
    token_s: float = 0.0
    fit_s: float = 0.0
    fit_unit_s: float = 0.0


#: Measured by ``python -m zsnli.bench.bakeoff_costs`` on 2026-12-06 (docs/bakeoff.md): a 2-core AMD EPYC (avx2,
#: avx512f, avx512_bf16, no amx) shared with a training run and other test runs, load average 5.6-7.2 (the nli and
#: encoder rows) and 5.9-7.1 (the fitted rows); a quiet machine of the kind does the work two to four times faster.
COSTS: dict[str, Cost] = {
    "nli": Cost(doc_s=0.511, pair_token_s=0.00107),
    "encoder": Cost(doc_s=0.139, token_s=0.00272),
    "majority": Cost(fit_s=4.4e-06, fit_unit_s=1.72e-11, doc_s=2.49e-05),
    "keyword_rules": Cost(fit_s=0.00142, fit_unit_s=6e-09, doc_s=0.000658),
    "tfidf_logreg": Cost(fit_s=0.0677, doc_s=0.0236),
    "tfidf_linearsvc": Cost(fit_s=0.312, fit_unit_s=7.59e-09, doc_s=0.0625),
    "tfidf_linearsvc_raw": Cost(fit_s=0.00778, fit_unit_s=1.14e-08, doc_s=0.00361),
    "char_nb": Cost(fit_s=0.0147, fit_unit_s=7.11e-08, doc_s=0.00391),
    "embedding_fitted": Cost(fit_s=0.0279, fit_unit_s=6.35e-08),
    "embedding_similarity": Cost(doc_s=0.00016),
}

#: Registry arm type -> its kind in `COSTS` (a type not here has no estimate).
KIND_OF = {"served": "nli", "pipeline": "nli", "majority": "majority", "keyword_rules": "keyword_rules",
           "tfidf_logreg": "tfidf_logreg", "tfidf_linearsvc": "tfidf_linearsvc", "char_nb": "char_nb",
           "embedding_logreg": "embedding_fitted", "embedding_knn": "embedding_fitted",
           "embedding_similarity": "embedding_similarity", "finetuned_encoder": "embedding_fitted"}

ENCODER_TYPES = ("embedding_logreg", "embedding_knn", "embedding_similarity", "finetuned_encoder")
"""Arm types that run the sentence encoder over the examples."""


@dataclass(frozen=True)
class PlanShape:
    """What an arm's cost depends on: ``n`` examples scored, ``fits`` (one per fold), ``train_chars`` (mean
    characters of a fit's training rows, summed over them), ``labels`` (mean candidate labels per example),
    ``chars`` / ``label_chars`` (mean characters of an example text / of a label description), ``tokens`` /
    ``label_tokens`` (their mean `token_bound`; None: characters / `CHARS_PER_TOKEN`)."""

    n: int
    fits: int
    train_chars: float
    labels: float
    chars: float
    label_chars: float
    tokens: float | None = None
    label_tokens: float | None = None

    @property
    def text_tokens(self) -> float:
        """Mean tokens of an example text (`token_bound`)."""
        return self.chars / CHARS_PER_TOKEN if self.tokens is None else self.tokens

    @property
    def label_text_tokens(self) -> float:
        """Mean tokens of a label description (`token_bound`)."""
        return self.label_chars / CHARS_PER_TOKEN if self.label_tokens is None else self.label_tokens

    @classmethod
    def of(cls, examples: Sequence[Any], plan: Any) -> "PlanShape":
        """The shape of ``plan`` (a `zsnli.compare.protocol.Plan`) over ``examples`` (`zsnli.harness.examples.
        Example`: ``text``, ``labels``); a fold with no training rows (protocol ``all``) is no fit."""
        rows = plan.test_rows
        fitted = [f for f in plan.folds if f.train]
        n = max(1, len(rows))
        labels = [lab for i in rows for lab in examples[i].labels]
        return cls(n=len(rows), fits=len(fitted),
                   train_chars=sum(len(examples[i].text) for f in fitted for i in f.train) / max(1, len(fitted)),
                   labels=sum(len(examples[i].labels) for i in rows) / n,
                   chars=sum(len(examples[i].text) for i in rows) / n,
                   label_chars=sum(len(x) for x in labels) / max(1, len(labels)),
                   tokens=sum(token_bound(examples[i].text) for i in rows) / n,
                   label_tokens=sum(token_bound(x) for x in labels) / max(1, len(labels)))


def _tokens(chars: float) -> float:
    return chars / CHARS_PER_TOKEN


def nli_pairs(labels: float, scoring: Mapping[str, Any] | None) -> float:
    """Cross-encoder pairs per example of a served arm under ``scoring`` (``RequestScoring.to_dict``: the served
    scoring as ``/health`` shows it; None: every label a pair): the label cascade keeps ``keep`` of K >=
    ``min_labels`` labels when the scoring has a cosine term and no content-free premise
    (`zsnli.request_scoring.prunes`, the server's rule)."""
    cascade = (scoring or {}).get("cascade")
    if (cascade and scoring.get("embedding_weight") and not scoring.get("content_free_premise")
            and labels >= cascade.get("min_labels", math.inf)):
        return min(labels, float(cascade.get("keep", labels)))
    return labels


def encoder_seconds(shape: PlanShape, encoder_window: int = ENCODER_WINDOW) -> float:
    """One pass of the sentence encoder over every example text, one text per call (as the bake-offs time it),
    plus the label descriptions once."""
    c = COSTS["encoder"]
    per_text = c.doc_s + c.token_s * min(encoder_window, shape.text_tokens + 2)
    per_label = c.doc_s + c.token_s * min(encoder_window, shape.label_text_tokens + 2)
    return shape.n * per_text + math.ceil(shape.labels) * per_label


def arm_seconds(type_name: str, params: Mapping[str, Any], shape: PlanShape, *, nli_window: int = NLI_WINDOW,
                encoder_window: int = ENCODER_WINDOW, shared_encoder: bool = False,
                template_chars: int = 0) -> float | None:
    """Estimated seconds of one arm of registry type ``type_name`` (with its suite ``params``) on ``shape``; None
    for a type without coefficients. ``shared_encoder``: the examples are embedded once outside the arm (the
    service), so an embedding arm does not count that pass; ``template_chars``: characters a hypothesis template
    adds to each label (a served arm's ``This text is about {}.``)."""
    kind = KIND_OF.get(type_name)
    if kind is None:
        return None
    if type_name == "tfidf_linearsvc" and params.get("calibration") == "raw":  # no Platt fits: another cost
        kind = "tfidf_linearsvc_raw"
    c = COSTS[kind]
    if kind == "nli":
        scoring = params.get("scoring")
        pair = min(nli_window, shape.text_tokens + shape.label_text_tokens + _tokens(template_chars) + 3)
        seconds = c.setup_s + shape.n * (c.doc_s + nli_pairs(shape.labels, scoring) * c.pair_token_s * pair)
        if (scoring or {}).get("embedding_weight"):  # the cosine term: the server embeds each text too
            seconds += encoder_seconds(shape, encoder_window)
        return seconds
    seconds = (c.setup_s + shape.fits * (c.fit_s + c.fit_unit_s * shape.train_chars * shape.labels)
               + shape.n * (c.doc_s + c.doc_char_s * shape.chars))
    if type_name in ENCODER_TYPES and not shared_encoder:
        seconds += encoder_seconds(shape, encoder_window)
    if type_name == "finetuned_encoder":
        seconds += shape.fits * float(params.get("max_fit_s", 60.0))
    return seconds


@dataclass
class Estimate:
    """Seconds per arm (None: no estimate for its type), plus the `SHARED_EMBEDDING` pass when arms share one
    (``shared_by``: those arms; the pass goes when the last of them does); ``total_s`` sums what is known."""

    arms: dict[str, float | None]
    shared_s: float = 0.0
    shared_by: frozenset[str] = frozenset()

    @property
    def total_s(self) -> float:
        return self.shared_s + sum(s for s in self.arms.values() if s is not None)

    def lines(self) -> list[str]:
        """``"name ~12 s"`` per item, largest first (no estimate: ``"name: no estimate"``)."""
        items = sorted(((s, name) for name, s in self.arms.items() if s is not None), reverse=True)
        if self.shared_s:
            items = sorted(items + [(self.shared_s, SHARED_EMBEDDING)], reverse=True)
        return ([f"{name} ~{_secs(s)}" for s, name in items]
                + [f"{name}: no estimate" for name, s in self.arms.items() if s is None])

    def to_drop(self, budget_s: float, keep: Sequence[str] = ()) -> list[str]:
        """Arms to leave out, most expensive first (an arm sharing the embedding pass counts its share of it),
        until the estimate is within ``budget_s``; never those in ``keep`` (the challenger). The shared pass
        goes when the last arm needing it does. Every droppable arm when even that does not fit."""
        share = self.shared_s / max(1, len(self.shared_by))
        order = sorted(((s + (share if n in self.shared_by else 0.0), n) for n, s in self.arms.items()
                        if s is not None and n not in keep), reverse=True)
        left, dropped, users = self.total_s, [], set(self.shared_by)
        for _, name in order:
            if left <= budget_s:
                break
            dropped.append(name)
            left -= self.arms[name] or 0.0
            if name in users:
                users.discard(name)
                left -= 0.0 if users else self.shared_s
        return dropped


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


class OverBudget(ValueError):
    """The plan's estimate exceeds the time budget; the message is one line saying by how much, which arms cost
    most, and what would fit."""


def check(estimate: Estimate, budget_s: float, budget_name: str, keep: Sequence[str] = ()) -> None:
    """Raise `OverBudget` when ``estimate.total_s`` exceeds ``budget_s`` (``budget_name``: the setting or flag
    that sets it, for the message); otherwise return."""
    if estimate.total_s <= budget_s:
        return
    drop = estimate.to_drop(budget_s, keep)
    advice = (f"leave out {', '.join(drop)}, " if drop and len(drop) < len(estimate.arms) else "")
    raise OverBudget(f"the plan is estimated at ~{_secs(estimate.total_s)} of arm work ({'; '.join(estimate.lines())}) "
                     f"against a time budget of {budget_s:g} s ({budget_name}): {advice}give fewer or shorter "
                     "examples or fewer labels, or raise the budget; nothing was run")
