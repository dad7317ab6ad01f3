"""Bake-off outputs: the JSON report as plain JSON, and the report file.

The JSON report is the plain dict built by `zsnli.compare.suite_bakeoff` (``validate.py bakeoff`` and
``compare``); `zsnli.compare.render` renders it, `zsnli.compare.receipts` seals it, this module makes it
plain JSON (`json_ready`) and writes it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any



def json_ready(report: Any) -> Any:
    """``report`` as a reader of its JSON file gets it back: NaN/inf -> None (`scrub_non_finite`), numpy
    scalars -> numbers, paths -> strings, tuples -> lists. What the receipt seals (`zsnli.compare.receipts.seal`),
    so that the written file verifies. Raises ``TypeError`` on a value JSON cannot hold."""
    return json.loads(json.dumps(scrub_non_finite(report), allow_nan=False, default=_jsonable))


def write_report_json(path: Path, obj: Any) -> None:
    """Write a report as strict, indented JSON (numpy scalars as numbers, paths as strings), creating parents.

    Raises ``ValueError`` on a NaN or infinity (pass the report through `scrub_non_finite` first) and
    ``TypeError`` on a value JSON cannot hold.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, allow_nan=False, default=_jsonable) + "\n", encoding="utf-8")


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def scrub_non_finite(o: Any) -> Any:
    """Replace NaN/inf floats by None, recursively through dicts, lists and tuples, so the report is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: scrub_non_finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [scrub_non_finite(v) for v in o]
    return o
