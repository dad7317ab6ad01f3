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

Files: ``<dir>/<name>.jsonl`` rows ``{"text", "label", "label_index"}`` and
``<dir>/<name>.labels.json`` ``{"dataset", "classes", "hypotheses",
"task_kind", "source": {"licence", ...}}`` (the layout of
``../shared/data/zsc-train``, documented in its README). These sets are for
TRAINING only: never for choosing or reporting (that is ``zsc-dev``'s role).

May import the standard library and `zsnli.training.nli_data` (Source, DataError).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

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
    """Read ``<name>.jsonl`` and its ``.labels.json``. Raises `DataError` naming the file and the fault."""
    path = Path(path)
    try:
        meta = json.loads(labels_path(path).read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    hypotheses = tuple(meta.get("hypotheses") or ())
    classes = tuple(meta.get("classes") or ())
    if len(hypotheses) < 2 or len(hypotheses) != len(classes):
        raise DataError(f"{labels_path(path)}: needs one hypothesis per class and >= 2 classes")
    texts, labels = [], []
    for i, row in enumerate(rows):
        idx, text = row.get("label_index"), row.get("text")
        if not isinstance(idx, int) or not 0 <= idx < len(classes) or not isinstance(text, str) or not text.strip():
            raise DataError(f"{path}: row {i + 1} needs a non-empty text and a label_index in [0, {len(classes)})")
        texts.append(text)
        labels.append(idx)
    return ZscSet(name=meta.get("dataset", path.stem), task_kind=meta.get("task_kind", ""), classes=classes,
                  hypotheses=hypotheses, texts=tuple(texts), labels=tuple(labels))


def set_pairs(zset: ZscSet, rng: random.Random, negative: str = NOT_ENTAILMENT,
              binary_negative: str = "contradiction") -> list[dict[str, str]]:
    """Two pairs per text: its class's hypothesis (entailment) and one other class's (the negative target).

    Returns ``2 * len(zset.texts)`` rows ``{"premise", "hypothesis", "label"}`` in text order (positive first).
    Raises `DataError` for an unknown target.
    """
    for target in (negative, binary_negative):
        if target not in NEGATIVE_TARGETS:
            raise DataError(f"unknown negative target {target!r}; choose from {', '.join(NEGATIVE_TARGETS)}")
    k = len(zset.hypotheses)
    neg_target = binary_negative if zset.is_binary_negation else negative
    pairs = []
    for text, gold in zip(zset.texts, zset.labels):
        other = rng.randrange(k - 1)
        other += other >= gold
        pairs.append({"premise": text, "hypothesis": zset.hypotheses[gold], "label": "entailment"})
        pairs.append({"premise": text, "hypothesis": zset.hypotheses[other], "label": neg_target})
    return pairs


def zsc_sources(data_dir: str | Path, commercial_only: bool = False, names: Sequence[str] | None = None) -> tuple[Source, ...]:
    """A `Source` (kind ``"zsc"``, role ``"train"``) per ``<name>.jsonl`` with a ``.labels.json`` in ``data_dir``.

    The licence comes from the set's ``.labels.json`` when the file is there.
    ``names`` keeps only those sets; ``commercial_only`` drops `RESEARCH_ONLY`.
    Files are not required to exist (the CLI checks `Preset.required_files` first).
    """
    data_dir = Path(data_dir)
    found = sorted(p for p in data_dir.glob("*.jsonl") if labels_path(p).is_file()) if data_dir.is_dir() else []
    chosen = [p for p in found if (not names or p.stem in names) and not (commercial_only and p.stem in RESEARCH_ONLY)]
    out = []
    for path in chosen:
        try:
            licence = json.loads(labels_path(path).read_text(encoding="utf-8"))["source"]["licence"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            licence = "see zsc-train/SOURCES.md"
        out.append(Source(name=f"zsc-train:{path.stem}", kind=ZSC_KIND, role="train", licence=licence, path=str(path)))
    return tuple(out)


def normalise_text(text: str) -> str:
    """Lower-cased, whitespace collapsed: the key of the overlap check (as zsc-train's README did it)."""
    return re.sub(r"\s+", " ", text.lower()).strip()


def texts_of(paths: Sequence[str | Path]) -> set[str]:
    """`normalise_text` of every ``"text"`` in these JSONL files, or in every ``*.jsonl`` of these folders.

    Used to keep choosing and reporting data (zsc-dev, the team dev set, the
    public examples) out of training. A path that does not exist is skipped.
    """
    out: set[str] = set()
    for path in map(Path, paths):
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path] if path.is_file() else []
        for f in files:
            for line in f.read_text(encoding="utf-8").split("\n"):  # not splitlines: U+2028 may sit inside a string
                text = json.loads(line).get("text") if line.strip() else None
                if isinstance(text, str):
                    out.add(normalise_text(text))
    return out


def build_zsc_pairs(sources: Sequence[Source], n_nli: int, ratio: float, seed: int,
                    negative: str = NOT_ENTAILMENT, exclude: set[str] | None = None
                    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """Pairs of every set, subsampled to ``round(ratio * n_nli)`` pairs (all when fewer exist).

    Texts are drawn uniformly over all sets with ``random.Random(seed)``,
    keeping each text's two pairs together. A text whose `normalise_text` is
    in ``exclude`` (`texts_of` the choosing/reporting data) is dropped and
    counted. Returns ``(rows, counts)``; counts has per-set ``rows``,
    ``dropped_overlap``, ``pairs_available``, ``pairs_used`` and the labels used.
    """
    rng = random.Random(seed)
    exclude = exclude or set()
    per_text: list[tuple[str, dict[str, str], dict[str, str]]] = []
    counts: dict[str, Any] = {"ratio_to_nli": ratio, "negative_target": negative, "sets": {}}
    for src in sources:
        zset = read_zsc_set(src.path)
        pairs = set_pairs(zset, rng, negative)
        kept = [(pos, neg) for pos, neg in zip(pairs[0::2], pairs[1::2]) if normalise_text(pos["premise"]) not in exclude]
        per_text.extend((src.name, pos, neg) for pos, neg in kept)
        counts["sets"][src.name] = {"rows": len(zset.texts), "task_kind": zset.task_kind,
                                    "dropped_overlap": len(zset.texts) - len(kept), "pairs_available": 2 * len(kept)}
    want_texts = min(len(per_text), round(ratio * n_nli / 2))
    rng.shuffle(per_text)
    kept = per_text[:want_texts]
    used = Counter(name for name, _, _ in kept)
    for name, entry in counts["sets"].items():
        entry["pairs_used"] = 2 * used.get(name, 0)
    rows = [{k: pair[k] for k in ("premise", "hypothesis", "label")} for _, pos, neg in kept for pair in (pos, neg)]
    counts["pairs_used"] = len(rows)
    counts["labels"] = dict(Counter(r["label"] for r in rows))
    return rows, counts
