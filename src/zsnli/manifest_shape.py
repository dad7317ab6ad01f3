"""The shape of a manifest's tables: what `zsnli.manifest.load_manifest` refuses before any check reads them.

A training manifest (``training_manifest.json``) or a sentence encoder's own (``encoder_manifest.json``) is JSON
that anyone may edit; the checks of `zsnli.manifest` read its file tables as ``{name: {"sha256", "bytes"}}``.
`manifest_shape_error` says, in one line naming the entry, what in those tables is not of that shape (a string, a
list, a missing key, a wrong type), so a malformed manifest is a one-line ``ManifestError``, never a traceback.

May import the standard library only.
"""

from __future__ import annotations

import json
from typing import Any


def manifest_shape_error(manifest: dict[str, Any]) -> str | None:
    """What is wrong with the shape of the tables a manifest's checks read, or None when nothing is.

    Every file table (``files``; the ``files`` of ``embedding`` and of each ``pretrained_artifacts`` entry, {} when
    absent) maps a name to an object whose ``sha256`` is a string and whose ``bytes``, when present, a non-negative
    integer (what `zsnli.manifest.hash_model_dir` writes); ``embedding``, ``pretrained_artifacts`` and ``variants``,
    when present and not null, are objects, the entries of the last two objects too, an artifact's ``dir`` a string.
    The text names the entry (``files.config.json is a string ("x"), not an object with sha256 and bytes``); the
    manifest's other fields are read by no check and left alone. ``manifest['files']`` must exist (the caller's
    check)."""
    tables = {"files": manifest["files"]}
    if manifest.get("embedding") is not None:
        if not isinstance(manifest["embedding"], dict):
            return f"embedding is {describe(manifest['embedding'])}, not an object"
        tables["embedding.files"] = manifest["embedding"].get("files", {})
    for key in ("pretrained_artifacts", "variants"):
        table = manifest.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            return f"{key} is {describe(table)}, not an object of named entries"
        for name, entry in table.items():
            if not isinstance(entry, dict):
                return f"{key}.{name} is {describe(entry)}, not an object"
            if key == "pretrained_artifacts":
                if not isinstance(entry.get("dir", name), str):
                    return f"{key}.{name}.dir is {describe(entry['dir'])}, not a string"
                tables[f"{key}.{name}.files"] = entry.get("files", {})
    for where, table in tables.items():
        problem = file_table_error(where, table)
        if problem:
            return problem
    return None


def file_table_error(where: str, table: Any) -> str | None:
    """What is wrong with the file table ``table`` (named ``where`` in the text, e.g. ``files``), or None: it must
    map each name to an object with a string ``sha256`` and, when present, a non-negative integer ``bytes`` (a
    boolean is no integer here)."""
    if not isinstance(table, dict):
        return f"{where} is {describe(table)}, not an object of files"
    for name, entry in table.items():
        if not isinstance(entry, dict):
            return f"{where}.{name} is {describe(entry)}, not an object with sha256 and bytes"
        if "sha256" not in entry:
            return f"{where}.{name} has no sha256"
        if not isinstance(entry["sha256"], str):
            return f"{where}.{name}.sha256 is {describe(entry['sha256'])}, not a string"
        size = entry.get("bytes", 0)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"{where}.{name}.bytes is {describe(size)}, not a non-negative integer"
    return None


def describe(value: Any) -> str:
    """A JSON value in a few words for a one-line error: its JSON type, and the value itself when it is short
    (at most 40 characters as JSON), e.g. ``a string ("x")``, ``a list ([1])``, ``null``."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False)
    kind = kinds.get(type(value), type(value).__name__)
    return f"{kind} ({text})" if len(text) <= 40 else kind
