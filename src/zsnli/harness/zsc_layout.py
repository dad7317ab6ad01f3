"""The one reader of the zsc layout: a folder of labelled sets, ``<name>.jsonl`` beside ``<name>.labels.json``.

Both the zsc-dev sets (``train.py select``: `zsnli.selection.devsets`) and the zsc-train sets (``train.py --zsc-dir``,
``train.py encoder``: `zsnli.training.zsc_nli`) come in this layout (the READMEs of ``../shared/data/zsc-dev`` and
``zsc-train``; docs/training.md):

* ``<name>.labels.json``: an object; ``classes`` (at least 2) and ``hypotheses`` (one per class, same order) are
  lists of non-blank strings; ``task_kind`` and ``dataset``, when present, strings; ``source``, when present, an
  object (its ``licence`` and ``repo`` are recorded); other keys are ignored (`read_labels`);
* ``<name>.jsonl``: one object a line, ``text`` a non-blank string and ``label_index`` an integer index into
  ``classes`` (a boolean is no index); ``label``, when given, ``classes[label_index]`` (`read_rows`).

`set_names` lists a folder's sets and refuses, never skips, a file of the layout that is a directory, a symbolic
link to nothing, or one without its other half. Every refusal is a `ZscLayoutError` (a ``ValueError``) of one line
naming the file (and the line of a row); the readers wrap it in their own error type.

May import the standard library and `zsnli.harness.cli` (`json_syntax`, `encoding_problem`; itself standard library
only).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cli import encoding_problem, json_syntax, json_type, jsonl_lines, not_utf8_place

ROWS_SUFFIX, LABELS_SUFFIX = ".jsonl", ".labels.json"


class ZscLayoutError(ValueError):
    """A file of a zsc-layout folder is missing, unreadable or malformed (one line naming the file)."""


@dataclass(frozen=True)
class Labels:
    """What a ``<name>.labels.json`` says (`read_labels`): K ``classes`` and K ``hypotheses`` (same order),
    ``task_kind`` (``""`` when absent), ``dataset`` (None when absent) and ``source`` ({} when absent)."""

    classes: tuple[str, ...]
    hypotheses: tuple[str, ...]
    task_kind: str = ""
    dataset: str | None = None
    source: dict[str, Any] = field(default_factory=dict)


def read_text(path: str | Path) -> str:
    """The UTF-8 text of ``path``. Raises `ZscLayoutError` naming it: a directory, a symbolic link to nothing, no
    such file, a UTF-16/32 file (named, with the iconv command: `zsnli.harness.cli.encoding_problem`, the words of
    every other JSONL reader), other bytes that are not UTF-8 (with the offset of the first bad byte), or another read
    failure."""
    path = Path(path)
    if path.is_dir():
        raise ZscLayoutError(f"{path} is a directory, not a file")
    if path.is_symlink() and not path.exists():
        raise ZscLayoutError(f"{path} is a symbolic link to nothing ({os.readlink(path)})")
    try:
        data = path.read_bytes()
        problem = encoding_problem(data[:4096])
        if problem:
            raise ZscLayoutError(f"{path} {problem}")
        return data.decode("utf-8-sig")  # a UTF-8 byte-order mark is skipped, as every JSONL reader does
    except FileNotFoundError:
        raise ZscLayoutError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ZscLayoutError(f"{path}: not UTF-8 text ({not_utf8_place(data, exc)})") from None
    except OSError as exc:
        raise ZscLayoutError(f"cannot read {path}: {exc.strerror or exc}") from None


def _strings(meta: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    """``meta[key]`` as a tuple of non-blank strings, else `ZscLayoutError` naming ``path`` and ``key``."""
    value = meta.get(key)
    if not isinstance(value, list):
        raise ZscLayoutError(f"{path}: {key} must be a list of strings, not "
                             f"{'absent' if key not in meta else json_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ZscLayoutError(f"{path}: {key}[{i}] must be a non-blank string, not "
                                 f"{'blank' if isinstance(item, str) else json_type(item)}")
    return tuple(value)


def read_labels(path: str | Path) -> Labels:
    """Read and check a ``<name>.labels.json`` (the module's rules). Raises `ZscLayoutError` naming ``path`` and
    the field: not JSON, not an object, ``classes``/``hypotheses`` not lists of non-blank strings, fewer than 2
    classes or not one hypothesis per class, ``task_kind``/``dataset`` not strings, ``source`` not an object."""
    path = Path(path)
    try:
        meta = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ZscLayoutError(f"{path}: not JSON ({json_syntax(exc)})") from None
    if not isinstance(meta, dict):
        raise ZscLayoutError(f"{path}: must be a JSON object with classes and hypotheses, not {json_type(meta)}")
    classes, hypotheses = _strings(meta, "classes", path), _strings(meta, "hypotheses", path)
    if len(classes) < 2 or len(classes) != len(hypotheses):
        raise ZscLayoutError(f"{path}: need >= 2 classes and one hypothesis per class (got {len(classes)} "
                             f"classes, {len(hypotheses)} hypotheses)")
    for key in ("task_kind", "dataset"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise ZscLayoutError(f"{path}: {key} must be a string, not {json_type(meta[key])}")
    if meta.get("source") is not None and not isinstance(meta["source"], dict):
        raise ZscLayoutError(f"{path}: source must be an object (licence, repo...), not {json_type(meta['source'])}")
    return Labels(classes, hypotheses, meta.get("task_kind") or "", meta.get("dataset"), dict(meta.get("source") or {}))


def read_rows(path: str | Path, classes: tuple[str, ...] | list[str]) -> list[tuple[str, int]]:
    """``(text, label_index)`` of every row of a ``<name>.jsonl``, in file order (blank lines skipped; lines split
    at ``\\n`` only, so a U+2028 inside a string stays in it). Raises `ZscLayoutError` naming ``path`` and the line:
    not JSON, not an object, ``label_index`` not an integer in ``[0, len(classes))`` (a boolean is refused),
    ``label`` given and not ``classes[label_index]``, ``text`` not a non-blank string; and for a file with no
    rows."""
    path, rows = Path(path), []
    for n, line in enumerate(jsonl_lines(read_text(path)), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ZscLayoutError(f"{path}:{n}: not JSON ({json_syntax(exc, column=False)})") from None
        if not isinstance(row, dict):
            raise ZscLayoutError(f"{path}:{n}: a row must be a JSON object, not {json_type(row)}")
        idx = row.get("label_index")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(classes):
            raise ZscLayoutError(f"{path}:{n}: label_index must be an integer in [0, {len(classes)}), not "
                                 f"{json.dumps(idx)}")
        if "label" in row and row["label"] != classes[idx]:
            raise ZscLayoutError(f"{path}:{n}: label {json.dumps(row['label'])} is not classes[{idx}] "
                                 f"({json.dumps(classes[idx])})")
        if not isinstance(row.get("text"), str) or not row["text"].strip():
            raise ZscLayoutError(f"{path}:{n}: text must be a non-blank string")
        rows.append((row["text"], idx))
    if not rows:
        raise ZscLayoutError(f"{path}: no rows")
    return rows


def set_names(directory: str | Path) -> list[str]:
    """The names of the sets in ``directory`` (each ``<name>.jsonl`` with its ``<name>.labels.json``), sorted; []
    when it holds none. Raises `ZscLayoutError` naming the file for an entry of the layout that is a directory or a
    symbolic link to nothing, and for a ``<name>.jsonl`` without its labels file or a labels file without its rows:
    a set is never left out silently. ``directory`` must exist (the caller's check)."""
    root = Path(directory)
    found: dict[str, set[str]] = {ROWS_SUFFIX: set(), LABELS_SUFFIX: set()}
    for path in sorted(root.iterdir()):
        suffix = LABELS_SUFFIX if path.name.endswith(LABELS_SUFFIX) else ROWS_SUFFIX if path.suffix == ROWS_SUFFIX \
            else None
        if suffix is None:
            continue
        if path.is_dir():
            raise ZscLayoutError(f"{path} is a directory, not a file of a set; move it out of {root}")
        if not path.exists():
            raise ZscLayoutError(f"{path} is a symbolic link to nothing ({os.readlink(path)}); fix or remove it")
        found[suffix].add(path.name[: -len(suffix)])
    rows, labels = found[ROWS_SUFFIX], found[LABELS_SUFFIX]
    unlabelled, rowless = sorted(rows - labels), sorted(labels - rows)
    if unlabelled:
        raise ZscLayoutError(f"{root / (unlabelled[0] + ROWS_SUFFIX)} has no {unlabelled[0]}{LABELS_SUFFIX} beside "
                             f"it (its classes and one hypothesis per class); add it, or move the file out of {root}")
    if rowless:
        raise ZscLayoutError(f"{root / (rowless[0] + LABELS_SUFFIX)} has no {rowless[0]}{ROWS_SUFFIX} beside it (the "
                             f"set's rows); add them, or move the file out of {root}")
    return sorted(rows)
