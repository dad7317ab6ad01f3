"""The selection's memo: a result pickled under a key of its inputs and of the code that computes it.

``train.py select`` keeps its leave-one-out figures in the cache folder (`zsnli.selection.cli.cached_grid`,
``cached_kind_weighted``) so that a rerun (e.g. to add ``--report-public``) takes seconds. The key includes
`code_digest` of the selection's rule modules, so a changed rule is never answered from an old pickle.

Imports: the standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

SELECTION_CODE = ("selection/grouped.py", "selection/grouped_doc.py", "selection/search.py", "selection/fits.py",
                  "selection/calibration.py", "request_scoring.py", "scoring.py")
"""The package files whose code decides a memoised selection result: part of every `memoised` key, so a change
to a rule (a tolerance, a tie-break) is never answered from a pickle the old code wrote."""


def code_digest(files: Sequence[str] = SELECTION_CODE) -> str:
    """sha256 over the bytes of ``files`` (paths relative to the ``zsnli`` package), in order.

    Raises OSError when one is missing."""
    import hashlib

    root, h = Path(__file__).resolve().parent.parent, hashlib.sha256()
    for name in files:
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()


def memoised(path: Path, key_parts: Any, field: str, compute):
    """``compute()``, memoised in the pickle ``path`` under the sha256 of ``key_parts``' canonical JSON and
    `code_digest` (stored as ``{"key": ..., field: value}``); a file holding another key is recomputed and
    overwritten."""
    import hashlib
    import pickle

    key = hashlib.sha256(json.dumps([key_parts, code_digest()], sort_keys=True, default=str).encode()).hexdigest()
    if path.is_file():
        with open(path, "rb") as handle:
            stored = pickle.load(handle)
        if stored.get("key") == key:
            return stored[field]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        pickle.dump({"key": key, field: value}, handle)
    return value
