"""NLI training data: sources, label normalisation, dedupe, calibration hold-out.

A source is either a hub dataset (id, config, splits, pinned revision), read
with `datasets.load_dataset`, or a local JSONL / JSONL.gz file of
``{"premise", "hypothesis", "label"}`` rows. Every row leaves this module as
``{"premise": str, "hypothesis": str, "label": "entailment"|"neutral"|"contradiction"}``.

The pipeline (`build_nli_data`): load each source -> normalise labels (drop
rows without a gold label) -> remove exact duplicate (premise, hypothesis)
pairs across all sources -> take a seeded calibration hold-out grouped by
premise, so that no premise is on both sides. Every step's counts are kept
for the training manifest.

May import the standard library, `zsnli.manifest` (file hashes) and, inside
`load_source` for hub sources only, ``datasets``.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..harness.cli import json_syntax, jsonl_lines
from ..manifest import sha256_file

LABELS = ("entailment", "neutral", "contradiction")
"""Canonical label order used for training targets (id 0, 1, 2)."""

# SNLI, MultiNLI and ANLI on the hub encode 0/1/2 in this order and -1 for "no gold label".
HUB_INT_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}

_STRING_ALIASES = {
    "entailment": "entailment",
    "entails": "entailment",
    "entailed": "entailment",
    "e": "entailment",
    "neutral": "neutral",
    "n": "neutral",
    "contradiction": "contradiction",
    "contradicts": "contradiction",
    "c": "contradiction",
}


class DataError(ValueError):
    """A source cannot be read or holds rows that cannot be mapped."""


@dataclass(frozen=True)
class Source:
    """One NLI data source.

    ``kind`` is ``"hub"`` (``hub_id``, ``config``, ``splits``, ``revision``),
    ``"local"`` (``path``) or ``"zsc"`` (``path`` of a classification set read
    as NLI pairs by `zsnli.training.zsc_nli`, not by `load_source`). ``role`` is one of ``train``, ``validation``,
    ``test``. ``licence`` is recorded in ``data_sources.json``.
    """

    name: str
    kind: str
    role: str
    licence: str = "unknown"
    hub_id: str | None = None
    config: str | None = None
    splits: tuple[str, ...] = ()
    revision: str | None = None
    path: str | None = None

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description (paths as given, file sha256 for local files)."""
        out = {k: v for k, v in asdict(self).items() if v not in (None, ())}
        if self.kind in ("local", "zsc") and self.path and Path(self.path).is_file():
            out["sha256"] = sha256_file(self.path)
        return out


def normalise_label(value: Any) -> str | None:
    """Map a source label to ``entailment|neutral|contradiction``; ``None`` means no gold label.

    Integers follow the hub convention (0 entailment, 1 neutral, 2
    contradiction, -1 no gold label). Strings are matched case-insensitively
    against the usual spellings; ``"-"`` and ``""`` mean no gold label.
    Raises ``DataError`` for anything else.
    """
    if isinstance(value, bool):
        raise DataError(f"unrecognised NLI label: {value!r}")
    if isinstance(value, int):
        if value == -1:
            return None
        if value in HUB_INT_LABELS:
            return HUB_INT_LABELS[value]
        raise DataError(f"unrecognised NLI label id: {value!r}")
    if isinstance(value, str):
        key = value.strip().lower()
        if key in ("", "-"):
            return None
        if key in _STRING_ALIASES:
            return _STRING_ALIASES[key]
        if key.lstrip("-").isdigit():
            return normalise_label(int(key))
    raise DataError(f"unrecognised NLI label: {value!r}")


def _rows_from_records(records: Iterable[dict[str, Any]], counts: Counter, where: Iterable[str] | None = None
                       ) -> list[dict[str, str]]:
    """The NLI rows of ``records`` (labels normalised; no gold label or an empty text dropped and counted).
    ``where``: each record's place (``path:line``), put before a `DataError` about it (a label no rule reads)."""
    rows = []
    places = iter(where) if where is not None else None
    for rec in records:
        place = next(places) if places is not None else None
        counts["read"] += 1
        try:
            if not isinstance(rec, Mapping):
                raise DataError(f"a row must be a JSON object, not {type(rec).__name__}")
            label = normalise_label(rec.get("label"))
        except DataError as exc:
            raise DataError(f"{place}: {exc}" if place else str(exc)) from None
        premise, hypothesis = rec.get("premise"), rec.get("hypothesis")
        if label is None:
            counts["dropped_no_gold_label"] += 1
            continue
        if not isinstance(premise, str) or not isinstance(hypothesis, str) or not premise.strip() or not hypothesis.strip():
            counts["dropped_empty_text"] += 1
            continue
        rows.append({"premise": premise, "hypothesis": hypothesis, "label": label})
    return rows


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file (gzip-compressed when the name ends in ``.gz``; a UTF-8 byte-order mark skipped; blank
    lines skipped). Raises ``DataError``: the file cannot be read or is not UTF-8, or a line is not JSON (named
    ``path:line``)."""
    return [row for _, row in read_numbered_jsonl(path)]


def read_numbered_jsonl(path: str | Path) -> list[tuple[int, Any]]:
    """`read_jsonl` with each row's line number: ``[(line, row), ...]``. Raises ``DataError`` as it does."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    rows = []
    for n, line in enumerate(jsonl_lines(text), 1):
        if line.strip():
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{n}: not JSON ({json_syntax(exc, column=False)})") from None
    return rows


def load_source(source: Source) -> tuple[list[dict[str, str]], dict[str, int]]:
    """Load one source's rows with normalised labels.

    Returns ``(rows, counts)``; counts has ``read``, ``dropped_no_gold_label``,
    ``dropped_empty_text``, ``kept``. Hub sources need network access (or a
    populated Hugging Face cache) and the ``datasets`` library.
    """
    counts: Counter = Counter()
    if source.kind == "local":
        if not source.path:
            raise DataError(f"local source {source.name} has no path")
        numbered = read_numbered_jsonl(source.path)
        rows = _rows_from_records([r for _, r in numbered], counts, (f"{source.path}:{n}" for n, _ in numbered))
    elif source.kind == "hub":
        import datasets  # heavy import, only on this path

        rows = []
        for split in source.splits:
            ds = datasets.load_dataset(source.hub_id, source.config, split=split, revision=source.revision)
            rows.extend(_rows_from_records(ds, counts))
    else:
        raise DataError(f"unknown source kind {source.kind!r} for {source.name}")
    counts["kept"] = len(rows)
    return rows, dict(counts)


def dedupe(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], int]:
    """Drop exact duplicate (premise, hypothesis) pairs, keeping the first occurrence.

    A repeated pair with a different label is dropped too (first label wins).
    Returns ``(kept_rows, n_removed)``.
    """
    seen: set[tuple[str, str]] = set()
    kept = []
    for row in rows:
        key = (row["premise"], row["hypothesis"])
        if key in seen:
            continue
        seen.add(key)
        kept.append(row)
    return kept, len(rows) - len(kept)


def hold_out_by_premise(
    rows: list[dict[str, str]], n_holdout: int, seed: int
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Split rows into (train, held_out) with whole premise groups on one side.

    Premises are shuffled with ``random.Random(seed)`` and their rows moved to
    the hold-out until it holds at least ``n_holdout`` rows. No premise
    appears on both sides. Raises ``DataError`` if ``n_holdout`` exceeds the rows.
    """
    if n_holdout > len(rows):
        raise DataError(f"hold-out of {n_holdout} rows requested from {len(rows)} rows")
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row["premise"], []).append(i)
    premises = sorted(groups)
    random.Random(seed).shuffle(premises)
    held: set[int] = set()
    for premise in premises:
        if len(held) >= n_holdout:
            break
        held.update(groups[premise])
    train = [r for i, r in enumerate(rows) if i not in held]
    held_rows = [r for i, r in enumerate(rows) if i in held]
    return train, held_rows


@dataclass
class NliData:
    """Training rows, calibration hold-out rows, validation sets and the counts of every step."""

    train: list[dict[str, str]]
    holdout: list[dict[str, str]]
    validation: dict[str, list[dict[str, str]]]
    counts: dict[str, Any] = field(default_factory=dict)


def label_counts(rows: Iterable[dict[str, str]]) -> dict[str, int]:
    """Rows per label, in canonical label order."""
    c = Counter(r["label"] for r in rows)
    return {label: c.get(label, 0) for label in LABELS}


def build_nli_data(
    train_sources: list[Source],
    validation_sources: list[Source],
    n_holdout: int,
    seed: int,
    max_validation_rows: int | None = None,
) -> NliData:
    """Load, normalise, dedupe and split the training data; load validation sets.

    ``max_validation_rows`` caps each validation set with a seeded sample (for
    cheap evaluation during training); ``None`` keeps all rows. Validation
    rows never enter training or the hold-out: training pairs that also occur
    in a validation set are removed and counted.
    """
    counts: dict[str, Any] = {"sources": {}}
    rows: list[dict[str, str]] = []
    for src in train_sources:
        src_rows, src_counts = load_source(src)
        src_counts["labels"] = label_counts(src_rows)
        counts["sources"][src.name] = src_counts
        rows.extend(src_rows)
    counts["train_rows_loaded"] = len(rows)
    rows, removed = dedupe(rows)
    counts["duplicates_removed"] = removed

    validation: dict[str, list[dict[str, str]]] = {}
    for src in validation_sources:
        v_rows, v_counts = load_source(src)
        if max_validation_rows is not None and len(v_rows) > max_validation_rows:
            v_rows = random.Random(seed).sample(v_rows, max_validation_rows)
        validation[src.name] = v_rows
        counts["sources"][src.name] = {**v_counts, "used": len(v_rows), "labels": label_counts(v_rows)}

    eval_pairs = {(r["premise"], r["hypothesis"]) for v in validation.values() for r in v}
    before = len(rows)
    rows = [r for r in rows if (r["premise"], r["hypothesis"]) not in eval_pairs]
    counts["removed_overlapping_validation"] = before - len(rows)

    train, holdout = hold_out_by_premise(rows, n_holdout, seed)
    counts["holdout_rows"] = len(holdout)
    counts["holdout_premises"] = len({r["premise"] for r in holdout})
    counts["holdout_labels"] = label_counts(holdout)
    counts["train_rows"] = len(train)
    counts["train_labels"] = label_counts(train)
    rng = random.Random(seed)
    rng.shuffle(train)
    return NliData(train=train, holdout=holdout, validation=validation, counts=counts)
