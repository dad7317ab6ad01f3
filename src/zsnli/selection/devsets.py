"""Readers for the labelled dev data used to choose scoring and calibration.

Two on-disk formats are read into one in-memory form, `DevSet`:

* the zsc-dev format (``../shared/data/zsc-dev``): ``<name>.jsonl`` with one
  ``{"text", "label_index"}`` object a line (``label`` optional: when given, the
  class at ``label_index``) and ``<name>.labels.json`` with ``classes`` and
  ``hypotheses`` (one per class, same order), and optionally ``task_kind`` and a
  ``source`` block (licence, repository...), read by `zsnli.harness.zsc_layout`;
* the examples format (``dev/zeroshot_dev.jsonl``, ``../shared/data/zsc/public.jsonl``,
  see DESIGN.md): ``{"id", "dataset", "text", "labels": [hypotheses], "label": gold index}``,
  grouped into one `DevSet` per ``dataset`` value.

`stratified_subsample` draws a seeded, class-stratified subset (scikit-learn's
``train_test_split``) so the NLI scores of every dev set can be cached on a CPU.

Imports: numpy, scikit-learn, ``zsnli.manifest`` (file digests), ``zsnli.harness.examples`` (the one
examples reader) and ``zsnli.harness.zsc_layout`` (the one reader of the zsc layout, shared with zsc-train) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..harness.examples import ExamplesError, load_examples
from ..harness.zsc_layout import ZscLayoutError, read_labels, read_rows, set_names
from ..manifest import sha256_file

__all__ = ["DevSet", "DevSetError", "list_zsc_dev", "read_zsc_dev", "read_example_rows", "read_examples",
           "stratified_subsample"]


class DevSetError(ValueError):
    """A dev data file is missing, malformed or inconsistent (the message names the file and line)."""


@dataclass(frozen=True)
class DevSet:
    """One labelled dataset: N documents, each with its own list of K_i hypotheses.

    name: dataset name; task_kind: e.g. ``"topic"``, ``"binary-property"`` (``""`` if unknown).
    texts: N documents (premises).
    hypotheses: N lists of hypotheses (label descriptions), one per candidate label of the row.
    gold: int array ``[N]``, the index of the gold hypothesis in its row's list.
    label_classes: N int arrays ``[K_i]``, the dataset class of each hypothesis of the row.
    classes: class names (``len(classes)`` = n_classes).
    files: ``{path: sha256}`` of the files the set was read from.
    source: the ``source`` block of a zsc-dev labels file (licence, repo...), else ``{}``.
    row_ids: index of each row in its source file (kept through subsampling).
    """

    name: str
    task_kind: str
    texts: list[str]
    hypotheses: list[list[str]]
    gold: np.ndarray
    label_classes: list[np.ndarray]
    classes: list[str]
    files: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    row_ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def gold_classes(self) -> np.ndarray:
        """The gold dataset class of each row, int ``[N]``."""
        return np.array([int(c[g]) for c, g in zip(self.label_classes, self.gold)], dtype=np.int64)


def list_zsc_dev(directory: str | Path) -> list[str]:
    """Names of the zsc-dev sets in ``directory`` (each ``<name>.jsonl`` with a ``<name>.labels.json``), sorted.

    Raises ``DevSetError`` (one line naming the file) when the directory does not exist or holds no set, and when a
    ``<name>.jsonl`` has no ``<name>.labels.json`` beside it or a labels file no rows, or either is a directory or a
    symbolic link to nothing (`zsnli.harness.zsc_layout.set_names`): a set is never left out silently."""
    root = Path(directory)
    if not root.is_dir():
        raise DevSetError(f"zsc-dev directory not found: {root}")
    try:
        names = set_names(root)
    except ZscLayoutError as exc:
        raise DevSetError(str(exc)) from None
    if not names:
        raise DevSetError(f"no <name>.jsonl + <name>.labels.json pairs in {root}")
    return names


def read_zsc_dev(directory: str | Path, name: str) -> DevSet:
    """Read zsc-dev set ``name``: every row gets the set's hypotheses in class order.

    The files are read and checked by `zsnli.harness.zsc_layout` (`read_labels`, `read_rows`: its rules, shared
    with the zsc-train reader). Raises ``DevSetError`` naming the file (and the line of a row): a missing, unreadable
    or non-UTF-8 file, ``classes``/``hypotheses`` that are not lists of strings or of different lengths, a row whose
    ``label_index`` is not an integer in range or disagrees with ``label``, a blank text, a file with no rows.
    """
    root = Path(directory)
    labels_path, rows_path = root / f"{name}.labels.json", root / f"{name}.jsonl"
    try:
        labels = read_labels(labels_path)
        rows = read_rows(rows_path, labels.classes)
    except ZscLayoutError as exc:
        raise DevSetError(str(exc)) from None
    texts, gold = [text for text, _ in rows], [idx for _, idx in rows]
    order = np.arange(len(labels.classes))
    return DevSet(name=name, task_kind=labels.task_kind, texts=texts,
                  hypotheses=[list(labels.hypotheses) for _ in texts], gold=np.array(gold, dtype=np.int64),
                  label_classes=[order for _ in texts], classes=list(labels.classes),
                  files={str(rows_path): sha256_file(rows_path), str(labels_path): sha256_file(labels_path)},
                  source=labels.source, row_ids=np.arange(len(texts)))


def read_example_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an examples-format file (``id``, ``dataset``, ``text``, ``labels``, ``label``), in file order.

    Read by the one examples reader, `zsnli.harness.examples.load_examples` (the bake-off's and the
    bench's too), plus the rule of a choice: at least 2 labels. Raises ``DevSetError`` (a
    ``ValueError``) naming the file and line of the first bad row, or the example with one label.
    """
    try:
        examples = load_examples(path).examples
    except ExamplesError as exc:
        raise DevSetError(str(exc)) from None
    rows = []
    for e in examples:
        if len(e.labels) < 2:
            raise DevSetError(f"{path}: example {e.id!r} has {len(e.labels)} label; a choice needs >= 2")
        rows.append({"id": e.id, "dataset": e.dataset, "text": e.text, "labels": list(e.labels), "label": e.label})
    return rows


def read_examples(path: str | Path) -> dict[str, DevSet]:
    """Read an examples-format file into one `DevSet` per ``dataset``, sorted by name.

    A dataset's classes are the distinct hypotheses its rows use, in order of
    first appearance (so rows may list labels in any order, or a subset).
    Raises ``DevSetError`` on a malformed row (no text, fewer than 2 labels,
    a gold index out of range).
    """
    p = Path(path)
    digest = sha256_file(p) if p.is_file() else None
    grouped: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for n, row in enumerate(read_example_rows(p)):
        grouped.setdefault(row["dataset"], []).append((n, row))
    out: dict[str, DevSet] = {}
    for name, rows in sorted(grouped.items()):
        classes: list[str] = list(dict.fromkeys(h for _, r in rows for h in r["labels"]))
        index = {h: i for i, h in enumerate(classes)}
        out[name] = DevSet(
            name=name, task_kind="", texts=[r["text"] for _, r in rows],
            hypotheses=[list(r["labels"]) for _, r in rows],
            gold=np.array([r["label"] for _, r in rows], dtype=np.int64),
            label_classes=[np.array([index[h] for h in r["labels"]], dtype=np.int64) for _, r in rows],
            classes=classes, files={str(p): digest} if digest else {}, row_ids=np.array([i for i, _ in rows]))
    return out


def stratified_subsample(ds: DevSet, n: int, seed: int = 0) -> DevSet:
    """At most ``n`` rows of ``ds``, stratified by gold class, drawn with ``seed``.

    Uses ``sklearn.model_selection.train_test_split(stratify=...)``; when a class
    has a single row (stratification impossible) the draw is a plain seeded
    random subset. Returns ``ds`` itself when it has ``<= n`` rows. Rows keep
    their original order. Raises ``ValueError`` when ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(ds) <= n:
        return ds
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(ds))
    strata = ds.gold_classes
    counts = np.bincount(strata)
    stratify = strata if counts[counts > 0].min() >= 2 and n >= np.count_nonzero(counts) else None
    keep, _ = train_test_split(idx, train_size=n, random_state=seed, stratify=stratify)
    keep = np.sort(keep)
    row_ids = ds.row_ids if ds.row_ids is not None else idx
    return replace(ds, texts=[ds.texts[i] for i in keep], hypotheses=[ds.hypotheses[i] for i in keep],
                   gold=ds.gold[keep], label_classes=[ds.label_classes[i] for i in keep], row_ids=row_ids[keep])
