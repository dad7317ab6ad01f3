"""The harness's one examples reader: load, check, write, resample for throughput, map labels to classes.

Used by validation (self-check, bake-off) and bench (side-by-side, throughput
gate). May import `zsnli.manifest` (file digests), `zsnli.harness.cli` (`json_syntax`, `encoding_problem`) and,
for ``hub:btzsc`` only, the ``datasets`` package.

The examples format is DESIGN.md's JSONL, one document a line::

    {"id": "...", "dataset": "agnews", "text": "...", "labels": ["...", ...], "label": 2}

``label`` is the index of the gold label in ``labels``. The file is UTF-8 (a byte-order mark is skipped, as
``zsnli classify --input`` skips it; UTF-16/32 is named with the iconv command that converts it, in
``zsnli classify``'s words: `zsnli.harness.cli.encoding_problem`). ``hub:btzsc`` names the
public BTZSC benchmark on the Hugging Face Hub instead of a file.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from zsnli.harness.cli import encoding_problem, json_syntax, jsonl_lines, not_utf8_place
from zsnli.manifest import sha256_file, sha256_json

HUB_PREFIX = "hub:"
BTZSC_REPO = "btzsc/btzsc"
# Dataset repository commit pinned for reproducibility (the revision the public
# Jev/BTZSC pilot protocol pins). Change it only together with the README.
BTZSC_REVISION = "fef2a2ac62b69c58670047dddf045c53d7c3cb5e"
BTZSC_DATASETS = (
    "amazonpolarity", "imdb", "appreviews", "yelpreviews", "rottentomatoes",
    "financialphrasebank", "emotiondair", "empathetic", "banking77",
    "biasframes_intent", "massive", "agnews", "yahootopics", "trueteacher",
    "manifesto", "capsotu", "biasframes_offensive", "biasframes_sex",
    "wikitoxic_toxicaggregated", "wikitoxic_obscene", "wikitoxic_threat",
    "wikitoxic_insult",
)
DEFAULT_EXAMPLES = "dev/smoke.jsonl"
#: the team-written development set shipped in the repository (dev/README.md)
DEV_EXAMPLES = "dev/zeroshot_dev.jsonl"
#: the public examples, for reporting only; a clone has no ../shared (docs/data.md)
SHARED_PUBLIC_EXAMPLES = "../shared/data/zsc/public.jsonl"
#: the examples format in a few words, for every ``--examples`` flag's help
EXAMPLES_FORMAT = ("JSONL, one example a line: id, dataset, text, labels (the candidate label names), label "
                   "(the index of the gold one in labels)")
#: what a command that needs examples says when it has none
EXAMPLES_HINT = ("pass --examples PATH (JSONL as docs/bakeoff.md's 'The examples file' says, e.g. "
                 "dev/zeroshot_dev.jsonl) or --examples hub:btzsc (needs network)")


class ExamplesError(ValueError):
    """The examples could not be read or a line breaks the examples format."""


@dataclass(frozen=True)
class Example:
    """One labelled document. ``label`` indexes ``labels``; ``reuse`` > 0 marks a rotated copy."""

    id: str | int
    dataset: str
    text: str
    labels: tuple[str, ...]
    label: int
    reuse: int = 0

    def request(self) -> dict[str, Any]:
        """The POST /classify body for this document."""
        return {"id": self.id, "text": self.text, "labels": list(self.labels)}


@dataclass
class ExampleSet:
    """Loaded examples plus where they came from.

    ``source`` is the path or hub spec given; ``sha256`` is the file's sha256
    (or, for the hub, of the canonical JSON of the loaded rows).
    """

    examples: list[Example]
    source: str
    sha256: str
    notes: list[str] = field(default_factory=list)

    def datasets(self) -> list[str]:
        """Dataset names in first-seen order."""
        return list(dict.fromkeys(e.dataset for e in self.examples))


def _check_row(obj: Any, where: str) -> Example:
    if not isinstance(obj, dict):
        raise ExamplesError(f"{where}: expected a JSON object")
    for key in ("id", "dataset", "text", "labels", "label"):
        if key not in obj:
            raise ExamplesError(f"{where}: missing field {key!r}")
    if not isinstance(obj["id"], (str, int)) or isinstance(obj["id"], bool):
        raise ExamplesError(f"{where}: 'id' must be a string or an integer")
    if not isinstance(obj["dataset"], str) or not obj["dataset"]:
        raise ExamplesError(f"{where}: 'dataset' must be a non-empty string")
    if not isinstance(obj["text"], str):
        raise ExamplesError(f"{where}: 'text' must be a string")
    labels = obj["labels"]
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise ExamplesError(f"{where}: 'labels' must be a non-empty list of strings")
    gold = obj["label"]
    if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(labels):
        raise ExamplesError(f"{where}: 'label' must be an index into 'labels' (0..{len(labels) - 1})")
    return Example(obj["id"], obj["dataset"], obj["text"], tuple(labels), gold)


def parse_examples(lines: Iterable[str], source: str = "<examples>") -> list[Example]:
    """Parse JSONL lines into examples; blank lines are skipped.

    Raises ``ExamplesError`` naming the line of the first bad row, a duplicate
    id, or an empty input.
    """
    examples: list[Example] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExamplesError(f"{where}: not JSON ({json_syntax(exc, column=False)})") from exc
        example = _check_row(obj, where)
        key = repr(example.id)
        if key in seen:
            raise ExamplesError(f"{where}: duplicate id {example.id!r}")
        seen.add(key)
        examples.append(example)
    if not examples:
        raise ExamplesError(f"{source}: no examples")
    return examples


def load_btzsc(max_per_dataset: int | None = None, datasets: Sequence[str] = BTZSC_DATASETS) -> list[Example]:
    """Load the BTZSC test sets from the hub at ``BTZSC_REVISION``.

    Each hub config stores one (text, hypothesis) pair per row with a binary
    ``labels`` column, K consecutive rows per document (the label
    descriptions in the same order for every document); K is the distance to
    the first repetition of the first row's hypothesis. Raises ``ExamplesError``
    with a one-line reason when the hub cannot be reached (offline machines,
    ``HF_HUB_OFFLINE=1``) or the ``datasets`` package is missing.
    """
    try:
        from datasets import load_dataset
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise ExamplesError("hub:btzsc needs the 'datasets' package") from exc
    examples: list[Example] = []
    for name in datasets:
        try:
            table = load_dataset(BTZSC_REPO, name=name, split="test", revision=BTZSC_REVISION)
        except Exception as exc:  # network, offline mode, missing revision: all one message
            raise ExamplesError(
                f"cannot load {BTZSC_REPO}@{BTZSC_REVISION[:12]} config {name!r} from the Hugging Face Hub "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). This needs network "
                "access; offline, pass a local examples file instead (e.g. dev/zeroshot_dev.jsonl)."
            ) from exc
        texts, hyps, flags = table["text"], table["hypothesis"], table["labels"]
        k = next((i for i in range(1, len(hyps)) if hyps[i] == hyps[0]), len(hyps))
        n_docs = len(texts) // k
        if max_per_dataset is not None:
            n_docs = min(n_docs, max_per_dataset)
        for d in range(n_docs):
            start = d * k
            row_flags = list(flags[start:start + k])
            if 1 not in row_flags:
                continue
            examples.append(Example(
                id=f"{name}-{d:05d}", dataset=name, text=texts[start],
                labels=tuple(hyps[start:start + k]), label=row_flags.index(1),
            ))
    return examples


def load_examples(spec: str | Path, max_per_dataset: int | None = None, limit: int | None = None) -> ExampleSet:
    """Load examples from a JSONL (or .jsonl.gz) path or from ``hub:btzsc``.

    ``max_per_dataset`` keeps the first N documents of each dataset (file
    order); ``limit`` then keeps the first N documents overall. Raises
    ``ExamplesError`` for a missing/malformed file, an unknown
    hub name or an unreachable hub.
    """
    spec = str(spec)
    notes: list[str] = []
    if spec.startswith(HUB_PREFIX):
        name = spec[len(HUB_PREFIX):]
        if name != "btzsc":
            raise ExamplesError(f"unknown hub examples {spec!r}; only 'hub:btzsc' is known")
        examples = load_btzsc(max_per_dataset)
        if limit is not None:
            examples = examples[:limit]
        digest = sha256_json([_row(e) for e in examples])
        notes.append(f"{BTZSC_REPO}@{BTZSC_REVISION}")
        return ExampleSet(examples, spec, digest, notes)
    path = Path(spec)
    if not path.is_file():
        what = "a directory, not a file" if path.is_dir() else "no such file"
        raise ExamplesError(f"examples {path}: {what}; {EXAMPLES_HINT}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as raw:
            data = raw.read()
    except OSError as exc:
        raise ExamplesError(f"cannot read {path}: {exc.strerror or exc}") from exc
    problem = encoding_problem(data[:4096])
    if problem:
        raise ExamplesError(f"{path} {problem}")
    try:
        text = data.decode("utf-8-sig")  # a UTF-8 byte-order mark is skipped
    except UnicodeDecodeError as exc:
        raise ExamplesError(f"{path}: not UTF-8 ({not_utf8_place(data, exc)}): JSONL is UTF-8") from None
    examples = parse_examples(jsonl_lines(text), str(path))
    digest = sha256_file(path)
    if max_per_dataset is not None:
        kept: list[Example] = []
        counts: dict[str, int] = {}
        for e in examples:
            if counts.get(e.dataset, 0) < max_per_dataset:
                counts[e.dataset] = counts.get(e.dataset, 0) + 1
                kept.append(e)
        if len(kept) < len(examples):
            notes.append(f"first {max_per_dataset} per dataset: {len(kept)} of {len(examples)} documents")
            digest = sha256_json({"file_sha256": digest, "rows": [_row(e) for e in kept]})
        examples = kept
    if limit is not None and limit < len(examples):
        notes.append(f"first {limit} of {len(examples)} documents")
        examples = examples[:limit]
        digest = sha256_json({"file_sha256": digest, "rows": [_row(e) for e in examples]})
    return ExampleSet(examples, str(path), digest, notes)


def first_existing(*candidates: str | Path, base: str | Path = ".") -> Path | None:
    """The first of ``candidates`` (relative to ``base``) that is a file, else None.

    How commands pick a default: e.g. ``SHARED_PUBLIC_EXAMPLES`` where the
    team's shared data is mounted, else the repository's ``DEV_EXAMPLES``.
    """
    for c in candidates:
        path = Path(base) / c
        if path.is_file():
            return path
    return None


def write_examples(path: str | Path, examples: Iterable[Example]) -> Path:
    """Write examples as JSONL in the examples format (what `load_examples` reads back); returns the path."""
    p = Path(path)
    with open(p, "w", encoding="utf-8") as handle:
        for e in examples:
            handle.write(json.dumps(_row(e), ensure_ascii=False) + "\n")
    return p


def _row(e: Example) -> dict[str, Any]:
    return {"id": e.id, "dataset": e.dataset, "text": e.text, "labels": list(e.labels), "label": e.label}


def rotate_words(text: str, shift: int) -> str:
    """Rotate ``text`` left by ``shift`` whole words (split on whitespace, joined by one space).

    Texts of fewer than two words come back unchanged; ``shift`` is taken
    modulo the word count.
    """
    words = text.split()
    if len(words) < 2:
        return text
    k = shift % len(words)
    return " ".join(words[k:] + words[:k])


def resample(examples: Sequence[Example], n: int | None, seed: int = 0) -> list[Example]:
    """``n`` documents for the throughput run (all examples, in order, when ``n`` is None).

    The first pass is the examples in file order (truncated if ``n`` is
    smaller); pass r >= 1 is a seeded shuffle whose texts are rotated by r
    whole words so that no two requests carry the same text (no server cache
    can help), with ids suffixed ``#r``. Raises ``ValueError`` if ``n`` < 1
    or there are no examples.
    """
    if not examples:
        raise ValueError("no examples to resample")
    if n is None:
        return list(examples)
    if n < 1:
        raise ValueError(f"--docs must be >= 1, got {n}")
    out = list(examples[:n])
    rng = random.Random(seed)
    reuse = 0
    while len(out) < n:
        reuse += 1
        order = list(examples)
        rng.shuffle(order)
        for e in order[: n - len(out)]:
            out.append(replace(e, id=f"{e.id}#{reuse}", text=rotate_words(e.text, reuse), reuse=reuse))
    return out


def dataset_classes(examples: Sequence[Example]) -> dict[str, list[str]]:
    """Per dataset, its class vocabulary: label strings in first-seen order over its rows."""
    vocab: dict[str, dict[str, None]] = {}
    for e in examples:
        bucket = vocab.setdefault(e.dataset, {})
        for label in e.labels:
            bucket.setdefault(label, None)
    return {name: list(labels) for name, labels in vocab.items()}
