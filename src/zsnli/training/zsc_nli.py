"""Classification data as NLI training pairs (the ``zsc-train`` sets).

Each labelled text becomes a premise; its own class's hypothesis is an
``entailment`` pair and one other class's hypothesis (drawn with a seeded
RNG) a negative pair. The negative's target is, by ``negative``:

* ``"not_entailment"`` (default): the pair is trained toward
  p(neutral) + p(contradiction), i.e. "not entailment" without forcing which
  of the two (the 2-way target of zero-shot classifiers, learned by the
  3-way head: `zsnli.training.trainer.nli_loss`);
* ``"neutral"`` or ``"contradiction"``: a hard 3-way label.

Binary property sets put the negated property at index 0 ("This tweet is
not sarcastic." / "This tweet is sarcastic."): their other hypothesis is the
negation of the true one, so its pair is a ``contradiction`` whatever
``negative`` says (``binary_negative`` changes that).

Two options of issue 30 change what a text's two pairs are (both off by default, so the
recipe of issue 20 is drawn identically):

* hard negatives (``hard_share``): with that probability the other class is the text's
  nearest wrong class by the sentence encoder (``nearest``, computed by
  `zsnli.training.hard_negatives`) instead of a uniform draw;
* negated hypotheses (``negated_share``): with that probability, in a set whose every
  hypothesis `negate_hypothesis` can negate (not the binary property sets, which hold their
  negation already), the pairs are ``(text, not gold)`` -> contradiction and
  ``(text, not other)`` -> entailment: the statement/negation reading of the benchmark's
  negation-pair tasks, taught on every kind of set.

Files: ``<dir>/<name>.jsonl`` rows ``{"text", "label", "label_index"}`` and
``<dir>/<name>.labels.json`` ``{"dataset", "classes", "hypotheses",
"task_kind", "source": {"licence", ...}}`` (the layout of
``../shared/data/zsc-train``, documented in its README; read and checked by
`zsnli.harness.zsc_layout`). These sets are for TRAINING only: never for choosing or reporting (that is ``zsc-dev``'s role).

May import the standard library, `zsnli.harness.zsc_layout` (the one reader of the layout, zsc-dev's too),
`zsnli.harness.cli` (`json_syntax`) and `zsnli.training.nli_data` (Source, DataError).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..harness.cli import json_syntax, jsonl_lines
from ..harness.zsc_layout import ZscLayoutError, read_labels, read_rows, read_text, set_names
from .nli_data import DataError, Source

NOT_ENTAILMENT = "not_entailment"
"""Training target of a negative pair meaning p(neutral) + p(contradiction) (never a model label)."""

NEGATIVE_TARGETS = (NOT_ENTAILMENT, "neutral", "contradiction")
ZSC_KIND = "zsc"
"""`Source.kind` of a classification set read as NLI pairs."""

RESEARCH_ONLY = frozenset({
    "atis_intent", "emocontext", "hahackathon_humour", "hotel_review_sentiment", "isear_emotion",
    "newsgroups20", "ohsumed_diseases", "politeness", "reuters_r8", "sarcasm_tweets", "snips_intent",
})
"""Sets whose licence is research-only, non-commercial or unknown (zsc-train/README.md and SOURCES.md,
read 2026-12-01); ``commercial_only`` leaves them out. The others state CC0, CC BY, CC BY-SA or AGPL-3.0."""


@dataclass(frozen=True)
class ZscSet:
    """One classification set: texts with gold class indices and one hypothesis per class."""

    name: str
    task_kind: str
    classes: tuple[str, ...]
    hypotheses: tuple[str, ...]
    texts: tuple[str, ...]
    labels: tuple[int, ...]

    @property
    def is_binary_negation(self) -> bool:
        """True for a binary property set (index 0 is the negated property)."""
        return self.task_kind == "binary-property" and len(self.classes) == 2


def labels_path(jsonl: str | Path) -> Path:
    """The ``.labels.json`` beside a set's ``.jsonl``."""
    jsonl = Path(jsonl)
    return jsonl.with_name(jsonl.name[: -len(".jsonl")] + ".labels.json")


def read_zsc_set(path: str | Path) -> ZscSet:
    """Read ``<name>.jsonl`` and its ``.labels.json``, checked by the rules of `zsnli.harness.zsc_layout` (the
    zsc-dev reader's too). Raises `DataError` naming the file (and the line of a row) and the fault: a missing,
    unreadable or non-UTF-8 file or a directory, ``classes``/``hypotheses`` not lists of strings or not one
    hypothesis per class, a row whose ``label_index`` is not an integer in range (a boolean is none) or disagrees
    with its ``label``, a blank text, no rows."""
    path = Path(path)
    try:
        meta = read_labels(labels_path(path))
        rows = read_rows(path, meta.classes)
    except ZscLayoutError as exc:
        raise DataError(str(exc)) from None
    return ZscSet(name=meta.dataset or path.stem, task_kind=meta.task_kind, classes=meta.classes,
                  hypotheses=meta.hypotheses, texts=tuple(t for t, _ in rows), labels=tuple(i for _, i in rows))


_AUXILIARIES = re.compile(r"\b(is|are|was|were)\b")
_THIRD_PERSON = {
    "argues": "argue", "asks": "ask", "complains": "complain", "contains": "contain", "describes": "describe",
    "discusses": "discuss", "expresses": "express", "gives": "give", "lets": "let", "limits": "limit",
    "makes": "make", "mentions": "mention", "refers": "refer", "reports": "report", "requests": "request",
    "says": "say", "shows": "show", "talks": "talk", "uses": "use", "wants": "want",
}
_VERB = re.compile(r"\b(" + "|".join(_THIRD_PERSON) + r")\b")
_NEGATIVE = re.compile(r"\b(not|no|never|neither|nor)\b|n't\b", re.IGNORECASE)


def negate_hypothesis(hypothesis: str) -> str | None:
    """The negation of an affirmative hypothesis, or ``None`` when this rule cannot write one.

    ``not`` goes after the first ``is/are/was/were`` ("The traveller is asking about flights." ->
    "The traveller is not asking about flights."), else the first third-person verb of a small
    table becomes ``does not <verb>`` ("The text expresses disgust." -> "The text does not express
    disgust."). A hypothesis that is already negative (not, no, never, neither, nor, n't) or has
    neither form gives ``None``.
    """
    if _NEGATIVE.search(hypothesis):
        return None
    m = _AUXILIARIES.search(hypothesis)
    if m:
        return hypothesis[: m.end()] + " not" + hypothesis[m.end():]
    m = _VERB.search(hypothesis)
    if m:
        return hypothesis[: m.start()] + "does not " + _THIRD_PERSON[m.group(1)] + hypothesis[m.end():]
    return None


def negated_hypotheses(zset: ZscSet) -> tuple[str, ...] | None:
    """`negate_hypothesis` of every hypothesis of a set, or ``None`` when the set is a binary property set
    (its negation is one of its own hypotheses) or any hypothesis cannot be negated."""
    if zset.is_binary_negation:
        return None
    negated = tuple(negate_hypothesis(h) for h in zset.hypotheses)
    return None if any(n is None for n in negated) else negated  # type: ignore[return-value]


def set_pairs(zset: ZscSet, rng: random.Random, negative: str = NOT_ENTAILMENT,
              binary_negative: str = "contradiction", negated_share: float = 0.0,
              nearest: Sequence[int] | None = None, hard_share: float = 0.0) -> list[dict[str, str]]:
    """Two pairs per text: its class's hypothesis (entailment) and one other class's (the negative target).

    ``nearest[i]`` is text i's nearest wrong class (`zsnli.training.hard_negatives`), taken as the
    other class with probability ``hard_share``; with probability ``negated_share`` (sets with
    `negated_hypotheses` only) the two pairs are the negated ones (module docstring). A share of 0
    draws nothing extra from ``rng``, so the default pairs are those of issue 20's recipe.
    Returns ``2 * len(zset.texts)`` rows ``{"premise", "hypothesis", "label"}`` in text order (positive
    first, the negated pair of the gold class counting as the first). Raises `DataError` for an
    unknown target or a ``nearest`` of another length.
    """
    for target in (negative, binary_negative):
        if target not in NEGATIVE_TARGETS:
            raise DataError(f"unknown negative target {target!r}; choose from {', '.join(NEGATIVE_TARGETS)}")
    if nearest is not None and len(nearest) != len(zset.texts):
        raise DataError(f"{zset.name}: {len(nearest)} nearest classes for {len(zset.texts)} texts")
    k = len(zset.hypotheses)
    neg_target = binary_negative if zset.is_binary_negation else negative
    negated = negated_hypotheses(zset) if negated_share > 0 else None
    pairs = []
    for i, (text, gold) in enumerate(zip(zset.texts, zset.labels)):
        other = rng.randrange(k - 1)
        other += other >= gold
        if nearest is not None and hard_share > 0 and rng.random() < hard_share:
            other = int(nearest[i])
        if negated is not None and rng.random() < negated_share:
            pairs.append({"premise": text, "hypothesis": negated[gold], "label": "contradiction"})
            pairs.append({"premise": text, "hypothesis": negated[other], "label": "entailment"})
            continue
        pairs.append({"premise": text, "hypothesis": zset.hypotheses[gold], "label": "entailment"})
        pairs.append({"premise": text, "hypothesis": zset.hypotheses[other], "label": neg_target})
    return pairs


def zsc_sources(data_dir: str | Path, commercial_only: bool = False, names: Sequence[str] | None = None) -> tuple[Source, ...]:
    """A `Source` (kind ``"zsc"``, role ``"train"``) per set (``<name>.jsonl`` with its ``.labels.json``) in
    ``data_dir``.

    The licence comes from the set's ``.labels.json`` (its ``source.licence``, else zsc-train's SOURCES.md).
    ``names`` keeps only those sets; ``commercial_only`` drops `RESEARCH_ONLY`. A folder that does not exist has
    none (the CLI checks it first). Raises `DataError` (one line naming the file) for a file of the layout that is a
    directory, a symbolic link to nothing, or without its other half (`zsnli.harness.zsc_layout.set_names`), as
    zsc-dev's reader refuses them: a set is never left out silently.
    """
    data_dir = Path(data_dir)
    try:
        found = set_names(data_dir) if data_dir.is_dir() else []
    except ZscLayoutError as exc:
        raise DataError(str(exc)) from None
    chosen = [n for n in found if (not names or n in names) and not (commercial_only and n in RESEARCH_ONLY)]
    out = []
    for name in chosen:
        path = data_dir / f"{name}.jsonl"
        try:
            licence = json.loads(labels_path(path).read_text(encoding="utf-8"))["source"]["licence"]
        except (OSError, KeyError, TypeError, ValueError):
            licence = "see zsc-train/SOURCES.md"
        out.append(Source(name=f"zsc-train:{name}", kind=ZSC_KIND, role="train", licence=licence, path=str(path)))
    return tuple(out)


def normalise_text(text: str) -> str:
    """Lower-cased, whitespace collapsed: the key of the overlap check (as zsc-train's README did it)."""
    return re.sub(r"\s+", " ", text.lower()).strip()


def texts_of(paths: Sequence[str | Path]) -> set[str]:
    """`normalise_text` of every ``"text"`` in these JSONL files, or in every ``*.jsonl`` of these folders.

    Used to keep choosing and reporting data (zsc-dev, the team dev set, the
    public examples) out of training. A path that does not exist is skipped. Raises `DataError` naming the file
    (and line) that cannot be read, is not UTF-8 (`zsnli.harness.zsc_layout.read_text`) or holds a line that is
    not JSON.
    """
    out: set[str] = set()
    for path in map(Path, paths):
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path] if path.is_file() else []
        for f in files:
            try:
                lines = jsonl_lines(read_text(f))
            except ZscLayoutError as exc:
                raise DataError(str(exc)) from None
            for n, line in enumerate(lines, 1):
                try:
                    row = json.loads(line) if line.strip() else None
                except json.JSONDecodeError as exc:
                    raise DataError(f"{f}:{n}: not JSON ({json_syntax(exc, column=False)})") from None
                text = row.get("text") if isinstance(row, dict) else None
                if isinstance(text, str):
                    out.add(normalise_text(text))
    return out


def build_zsc_pairs(sources: Sequence[Source], n_nli: int, ratio: float, seed: int,
                    negative: str = NOT_ENTAILMENT, exclude: set[str] | None = None, negated_share: float = 0.0,
                    hard_negatives: Mapping[str, Sequence[int]] | None = None, hard_share: float = 0.0,
                    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """Pairs of every set, subsampled to ``round(ratio * n_nli)`` pairs (all when fewer exist).

    Texts are drawn uniformly over all sets with ``random.Random(seed)``,
    keeping each text's two pairs together. A text whose `normalise_text` is
    in ``exclude`` (`texts_of` the choosing/reporting data) is dropped and
    counted. ``negated_share``, ``hard_negatives`` (nearest wrong class per text, by source
    name; a set missing there draws uniformly) and ``hard_share``: `set_pairs`.
    Returns ``(rows, counts)``; counts has per-set ``rows``, ``dropped_overlap``,
    ``pairs_available``, ``pairs_used``, ``negated_pairs`` (0 for a set without
    `negated_hypotheses`), and the labels used.
    """
    rng = random.Random(seed)
    exclude = exclude or set()
    hard_negatives = hard_negatives or {}
    per_text: list[tuple[str, dict[str, str], dict[str, str]]] = []
    counts: dict[str, Any] = {"ratio_to_nli": ratio, "negative_target": negative, "sets": {}}
    if negated_share > 0 or hard_share > 0:
        counts.update(negated_share=negated_share, hard_negative_share=hard_share,
                      hard_negative_sets=sorted(n for n in hard_negatives if hard_share > 0))
    for src in sources:
        zset = read_zsc_set(src.path)
        pairs = set_pairs(zset, rng, negative, negated_share=negated_share,
                          nearest=hard_negatives.get(src.name), hard_share=hard_share)
        kept = [(pos, neg) for pos, neg in zip(pairs[0::2], pairs[1::2]) if normalise_text(pos["premise"]) not in exclude]
        per_text.extend((src.name, pos, neg) for pos, neg in kept)
        counts["sets"][src.name] = {"rows": len(zset.texts), "task_kind": zset.task_kind,
                                    "dropped_overlap": len(zset.texts) - len(kept), "pairs_available": 2 * len(kept)}
    want_texts = min(len(per_text), round(ratio * n_nli / 2))
    rng.shuffle(per_text)
    kept = per_text[:want_texts]
    used = Counter(name for name, _, _ in kept)
    negated_used = Counter(name for name, pos, _ in kept if pos["label"] == "contradiction")
    for name, entry in counts["sets"].items():
        entry["pairs_used"] = 2 * used.get(name, 0)
        if negated_share > 0:
            entry["negated_pairs"] = 2 * negated_used.get(name, 0)
    rows = [{k: pair[k] for k in ("premise", "hypothesis", "label")} for _, pos, neg in kept for pair in (pos, neg)]
    counts["pairs_used"] = len(rows)
    counts["labels"] = dict(Counter(r["label"] for r in rows))
    return rows, counts
