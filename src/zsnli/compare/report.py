"""Bake-off outputs: the receipt, the reliability-diagram PNGs and the one-file HTML report.

The JSON report is the plain dict built by `zsnli.compare.bakeoff`; this
module only renders it (HTML) and seals it (receipt).
"""

from __future__ import annotations

import base64
import html
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


def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return format(x, spec)
    return html.escape(str(x))


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.4em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}
th{background:#f2f2f2} td:first-child,th:first-child{text-align:left}
.arm{border-top:2px solid #888;margin-top:2em;padding-top:0.5em}
.err{color:#b00} code{background:#f4f4f4;padding:1px 4px}
"""


def render_html(report: dict[str, Any], pngs: dict[str, bytes]) -> str:
    """The whole bake-off as one self-contained HTML page (PNGs embedded as base64 data URIs)."""
    ex = report["examples"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>zsnli bake-off</title><style>{_CSS}</style></head><body>",
             "<h1>zsnli bake-off</h1>",
             f"<p>Examples: <code>{html.escape(ex['source'])}</code> ({ex['n']} documents, {len(ex['datasets'])} datasets), "
             f"sha256 <code>{ex['sha256']}</code></p>",
             f"<p>Headline: mean over datasets of the normalised {html.escape(report['metric'])} "
             "(0 = uniform probabilities, 100 = gold labels).</p>"]
    lb_rows = []
    for r in report["leaderboard"]:
        lb_rows.append([html.escape(r["arm"]), html.escape(r["kind"]), _fmt(r["macro_f1"]), _fmt(r["accuracy"]),
                        _fmt(r["ece"]), _fmt(r["calibrated_macro_f1"]), _fmt(r["normalised"], ".1f"),
                        _fmt(r["p50_ms"], ".1f"), _fmt(r["p95_ms"], ".1f"), _fmt(r["docs_per_s"], ".2f"),
                        str(r["concurrency"]), str(r["failed"])])
    parts.append("<h2>Leaderboard</h2><p>Quality figures are means over datasets (each dataset weighs the same); "
                 "the escalation, worst slices and reliability diagrams pool documents.</p>")
    parts.append(_table(["arm", "kind", "macro-F1 (mean)", "accuracy (mean)", "ECE (mean)", "cal. F1 (mean)",
                         "normalised (mean)", "p50 ms/doc",
                         "p95 ms/doc", "docs/s", "concurrency", "failed"], lb_rows))
    parts.append("<h2>Escalation</h2>")
    esc_rows = []
    for arm in report["arms"]:
        for e in arm.get("escalation", []):
            if e["reachable"]:
                esc_rows.append([html.escape(arm["name"]), _fmt(e["target"], ".2f"), _fmt(e["threshold"], ".4f"),
                                 _fmt(100 * e["kept_fraction"], ".1f"), _fmt(100 * e["escalated_fraction"], ".1f"),
                                 _fmt(e["kept_accuracy"])])
            else:
                esc_rows.append([html.escape(arm["name"]), _fmt(e["target"], ".2f"), "unreachable", "0.0", "100.0", "n/a"])
    parts.append(_table(["arm", "target accuracy (pooled)", "threshold", "% kept", "% to a person",
                         "kept accuracy (pooled)"], esc_rows))
    for arm in report["arms"]:
        parts.append(f"<div class='arm'><h2>{html.escape(arm['name'])} <small>({html.escape(arm['kind'])})</small></h2>")
        ident = ", ".join(f"{html.escape(str(k))}: <code>{html.escape(str(v))}</code>" for k, v in arm["identity"].items() if v is not None)
        parts.append(f"<p>{ident}</p>")
        if arm.get("error"):
            parts.append(f"<p class='err'>arm failed: {html.escape(arm['error'])}</p></div>")
            continue
        png = pngs.get(arm["name"])
        if png:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f"<img alt='reliability diagram of {html.escape(arm['name'])}' src='data:image/png;base64,{data}'>")
        rows = []
        for ds, c in arm["scores"]["per_dataset"].items():
            rows.append([html.escape(ds), str(c["n"]), str(c["n_classes"]), _fmt(c["accuracy"]), _fmt(c["macro_f1"]),
                         _fmt(c["ece"]), _fmt(c["calibrated_macro_f1"]), _fmt(c["floor"]), _fmt(c["ceiling"]),
                         _fmt(c["normalised"], ".1f")])
        parts.append(_table(["dataset", "n", "labels", "accuracy", "macro-F1", "ECE", "cal. F1", "floor", "ceiling",
                             "normalised"], rows))
        slices = arm.get("worst_slices", [])
        parts.append(f"<h3>Worst slices (n &ge; {report['options']['min_slice_n']}, Wilson 95% top below the arm's "
                     f"pooled accuracy {_fmt(arm['scores']['pooled_accuracy'])})</h3>")
        if slices:
            parts.append(_table(["slice", "kind", "n", "accuracy", "95% interval", "gap x sqrt(n)"],
                                [[html.escape(s["name"]), s["kind"], str(s["n"]), _fmt(s["accuracy"]),
                                  f"{s['low']:.3f} - {s['high']:.3f}", _fmt(s["rank_score"], ".2f")] for s in slices]))
        else:
            parts.append("<p>none</p>")
        if arm.get("errors"):
            parts.append("<p class='err'>" + "<br>".join(html.escape(e) for e in arm["errors"][:5]) + "</p>")
        parts.append("</div>")
    parts.append(f"<h2>Receipt</h2><p><code>{report['receipt']['sha256']}</code></p>"
                 f"<p>{html.escape(report['receipt']['covers'])}</p></body></html>")
    return "\n".join(parts)


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
