"""The benches' JSON reports: one writer for every ``--json`` / ``--out`` of `zsnli.bench` (issue 41).

May import: the standard library. Used by the bench commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping


def write_report(path: str | Path | None, report: Mapping[str, Any]) -> None:
    """Write ``report`` to ``path`` as indented JSON with a final newline (its folder made first); nothing
    when ``path`` is None. Raises ``OSError`` when it cannot be written, ``TypeError`` for a value JSON
    cannot hold."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
