"""Bake-off outputs: the receipt, the reliability-diagram PNGs and the JSON report file.

The JSON report is the plain dict built by `zsnli.compare.suite_bakeoff` (``validate.py bakeoff`` and
``compare``); `zsnli.compare.bakeoff_html` renders it, this module seals it (receipt) and writes it.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from zsnli.manifest import sha256_json
from zsnli.metrics import ReliabilityBins

RECEIPT_DECIMALS = 6
RECEIPT_FIELDS = ("n", "n_classes", "accuracy", "macro_f1", "ece", "calibrated_macro_f1", "floor", "ceiling", "normalised")


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, RECEIPT_DECIMALS)
    return x


def receipt_payload(examples_sha256: str, arms: list[dict[str, Any]]) -> dict[str, Any]:
    """The canonical content the receipt hashes.

    ``arms`` are the report's arm entries (each with ``name``, ``receipt_id``
    and ``scores.per_dataset``). The scorecard is the per-dataset quality
    figures rounded to 6 decimals; timings are left out because they differ
    from run to run while the quality figures of the same model and examples
    do not.
    """
    scorecard = {}
    for arm in arms:
        per = (arm.get("scores") or {}).get("per_dataset") or {}
        scorecard[arm["name"]] = {ds: {k: _round(card.get(k)) for k in RECEIPT_FIELDS} for ds, card in per.items()}
    return {
        "examples_sha256": examples_sha256,
        "arms": [{"name": a["name"], "id": a["receipt_id"]} for a in arms],
        "scorecard": scorecard,
    }


def receipt(examples_sha256: str, arms: list[dict[str, Any]]) -> str:
    """sha256 (hex) of the canonical JSON of `receipt_payload`."""
    return sha256_json(receipt_payload(examples_sha256, arms))


def reliability_png(bins: ReliabilityBins, title: str) -> bytes:
    """A reliability diagram as PNG bytes: accuracy per confidence bin against the diagonal, counts below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    centres = (bins.edges[:-1] + bins.edges[1:]) / 2
    width = bins.edges[1] - bins.edges[0]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(4.2, 4.8), gridspec_kw={"height_ratios": [3, 1]}, sharex=True)
    filled = bins.counts > 0
    top.bar(centres[filled], bins.accuracy[filled], width=width * 0.95, color="#4c72b0", edgecolor="white",
            label="accuracy")
    acc, conf = bins.accuracy[filled], bins.confidence[filled]
    top.bar(centres[filled], np.abs(conf - acc), bottom=np.minimum(acc, conf), width=width * 0.95,
            facecolor="none", edgecolor="#c44e52", hatch="///", linewidth=0.8, label="gap to mean confidence")
    top.plot([0, 1], [0, 1], "k--", linewidth=1)
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.set_title(title, fontsize=10)
    top.legend(loc="upper left", fontsize=8)
    bottom.bar(centres, bins.counts, width=width * 0.95, color="#8c8c8c")
    bottom.set_xlabel("top-1 confidence")
    bottom.set_ylabel("docs")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def reliability_from_dict(d: dict[str, Any]) -> ReliabilityBins:
    """Rebuild `ReliabilityBins` from its JSON form in the report."""
    return ReliabilityBins(edges=np.asarray(d["edges"], dtype=float), counts=np.asarray(d["counts"], dtype=int),
                           confidence=np.asarray([np.nan if v is None else v for v in d["confidence"]], dtype=float),
                           accuracy=np.asarray([np.nan if v is None else v for v in d["accuracy"]], dtype=float))


# --------------------------------------------------------------------------- the JSON report file


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
