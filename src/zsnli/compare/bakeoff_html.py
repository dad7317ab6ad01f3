"""One-file HTML of a bake-off report: leaderboard, protocol, escalation, and per arm the reliability
diagram, the coverage-vs-accuracy curve, per-class F1, top confusions and the worst slices.

Built for many labels: per-class F1 lists the weakest classes first (all of
them folded under a <details>), and confusions are the most frequent
(gold -> predicted) pairs rather than a K x K matrix, readable at 72 labels.

Imports: matplotlib (Agg), `zsnli.compare.report` (reliability diagram).
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import Any, Sequence

from zsnli.compare.report import reliability_from_dict, reliability_png

WORST_CLASSES_SHOWN = 12
CSS = ("body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}"
       "table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}"
       "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f2f2f2}"
       "td.l,th.l{text-align:left}.arm{border-top:2px solid #444;margin-top:28px;padding-top:6px}"
       ".err{color:#b00}.figs img{margin-right:12px;vertical-align:top}small{color:#666}"
       "summary{cursor:pointer;color:#1a5fb4}")


def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec) if isinstance(x, (int, float)) and not isinstance(x, bool) else html.escape(str(x))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """HTML table; the first ``left`` columns are left-aligned; cells must already be escaped."""
    head = "".join(f"<th class='{'l' if i < left else ''}'>{h}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class='{'l' if i < left else ''}'>{c}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>"


def coverage_png(curves: dict[str, dict], targets: Sequence[float], title: str) -> bytes:
    """Kept accuracy against the share of documents kept (most confident first), one line per curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.9))
    for name, c in curves.items():
        ax.plot(c["coverage"], c["accuracy"], linewidth=1.6, label=name)
    for t in targets:
        ax.axhline(t, color="#999", linestyle="--", linewidth=0.9)
        ax.text(0.01, t, f" target {t:g}", va="bottom", fontsize=7, color="#666")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("share of documents kept (the rest go to a person)")
    ax.set_ylabel("accuracy of the kept documents")
    ax.set_title(title, fontsize=10)
    if len(curves) > 1:
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _leaderboard(report: dict) -> str:
    rows = []
    for k, r in enumerate(report["leaderboard"], 1):
        rows.append([str(k), html.escape(r["arm"]), r["kind"], html.escape(r["type"]), _fmt(r["macro_f1"]),
                     _fmt(r["accuracy"]), _fmt(r["ece"]), _fmt(r["calibrated_macro_f1"]), _fmt(r["normalised"], ".1f"),
                     _fmt(r["p50_ms"], ".1f"), _fmt(r["p95_ms"], ".1f"), _fmt(r["docs_per_s"], ".1f"),
                     _fmt(r["fit_s"], ".1f") + f"<br><small>{html.escape(r['fit_note'])}</small>",
                     _fmt(r["peak_rss_mb"], ".0f"), html.escape(r["cost"]),
                     f"<span class='err'>{html.escape(r['error'])}</span>" if r["error"] else _fmt(r["failed"], "d")])
    out = _table(["#", "arm", "kind", "type", "macro-F1", "accuracy", "ECE", "cal. macro-F1", "normalised", "p50 ms/doc",
                  "p95 ms/doc", "docs/s", "fit s", "peak RSS MiB", "cost", "failed docs"], rows, left=4)
    c = report["constraints"]
    if c["max_p95_ms"] is not None or c["max_rss_mb"] is not None:
        out += (f"<p>Best arm with p95 &le; {_fmt(c['max_p95_ms'], 'g')} ms/doc and peak RSS &le; "
                f"{_fmt(c['max_rss_mb'], 'g')} MiB: <b>{html.escape(c['best'] or 'no arm fits')}</b></p>")
    return out


def _protocol(report: dict) -> str:
    rows = [[html.escape(ds), m["method"], str(m["folds"]), str(m["n"]), str(m["n_test"]), _fmt(m["train_per_fold"], ".1f")]
            for ds, m in report["protocol"]["per_dataset"].items()]
    return (f"<p>{html.escape(report['protocol']['description'])}</p>"
            + _table(["dataset", "method", "folds", "rows", "test rows", "training rows per fit"], rows))


def _escalation(report: dict) -> str:
    rows = []
    for a in report["arms"]:
        for e in a.get("escalation", []):
            rows.append([html.escape(a["name"]), _fmt(e["target"], ".2f"),
                         _fmt(e["threshold"], ".4f") if e["reachable"] else "unreachable",
                         _fmt(100 * e["kept_fraction"], ".1f"), _fmt(100 * e["escalated_fraction"], ".1f"),
                         _fmt(e["kept_accuracy"])])
    return _table(["arm", "target accuracy", "threshold", "% kept", "% to a person", "kept accuracy"], rows)


def _per_class(arm: dict) -> str:
    flat = [(ds, c) for ds, classes in arm["per_class"].items() for c in classes if c["support"] > 0]
    flat.sort(key=lambda t: (t[1]["f1"], -t[1]["support"]))

    def rows(items):
        return [[html.escape(ds), html.escape(c["label"]), str(c["support"]), _fmt(c["precision"]), _fmt(c["recall"]),
                 _fmt(c["f1"])] for ds, c in items]

    head = ["dataset", "class", "test rows", "precision", "recall", "F1"]
    return (f"<h3>Per-class F1: the {min(WORST_CLASSES_SHOWN, len(flat))} weakest of {len(flat)} classes</h3>"
            + _table(head, rows(flat[:WORST_CLASSES_SHOWN]), left=2)
            + f"<details><summary>all {len(flat)} classes</summary>{_table(head, rows(flat), left=2)}</details>")


def _confusions(arm: dict) -> str:
    rows = [[html.escape(c["dataset"]), html.escape(c["gold"]), html.escape(c["predicted"]), str(c["count"]),
             _fmt(100 * c["share_of_gold"], ".0f")] for c in arm["confusions"]]
    return ("<h3>Top confusions (gold &rarr; predicted)</h3>"
            + (_table(["dataset", "gold", "predicted", "documents", "% of gold"], rows, left=3) if rows else "<p>none</p>"))


def _slices(arm: dict, min_support: int) -> str:
    rows = [[html.escape(s["facet"]), html.escape(s["name"]), s["kind"], str(s["n"]), _fmt(s["accuracy"]),
             f"{s['low']:.3f} &ndash; {s['high']:.3f}", _fmt(s["gap"]), _fmt(s["rank_score"], ".2f")]
            for s in arm["slices"][:15]]
    title = (f"<h3>Worst slices (n &ge; {min_support}; 95% Wilson top below the arm's accuracy "
             f"{_fmt(arm['scores']['pooled_accuracy'])}; ranked by gap &times; &radic;n)</h3>")
    return title + (_table(["facet", "slice", "declared / discovered", "n", "accuracy", "95% interval", "gap",
                            "gap x sqrt(n)"], rows, left=3) if rows else "<p>none</p>")


def _arm(arm: dict, report: dict) -> str:
    ident = ", ".join(f"{html.escape(str(k))}: <code>{html.escape(str(v))}</code>"
                      for k, v in arm["identity"].items() if v not in (None, {}, ""))
    parts = [f"<div class='arm'><h2>{html.escape(arm['name'])} <small>({arm['kind']}, {html.escape(arm['type'])})</small></h2>",
             f"<p>{ident}</p><p><small>peak RSS: {html.escape(arm['rss_source'] or 'n/a')}</small></p>"]
    if arm.get("error"):
        return "".join(parts) + f"<p class='err'>arm failed: {html.escape(arm['error'])}</p></div>"
    bins = reliability_from_dict(arm["reliability"])
    targets = [e["target"] for e in arm["escalation"]]
    parts.append("<div class='figs'>"
                 + _img(reliability_png(bins, f"{arm['name']}: ECE (pooled) {bins.ece:.3f}"), f"reliability of {arm['name']}")
                 + _img(coverage_png({arm["name"]: arm["coverage"]}, targets, f"{arm['name']}: coverage vs accuracy"),
                        f"coverage of {arm['name']}") + "</div>")
    parts += [_per_class(arm), _confusions(arm), _slices(arm, report["options"]["min_support"])]
    if arm.get("errors"):
        parts.append("<p class='err'>" + "<br>".join(html.escape(e) for e in arm["errors"][:5]) + "</p>")
    return "".join(parts) + "</div>"


def render_bakeoff_html(report: dict) -> str:
    """The whole report as one self-contained HTML page (PNG figures inlined as data URIs)."""
    ex = report["examples"]
    ok = [a for a in report["arms"] if not a.get("error")]
    targets = report["options"]["targets"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>zsnli bake-off: {html.escape(report['suite']['name'])}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>Bake-off: suite {html.escape(report['suite']['name'])}</h1>",
             f"<p>{html.escape(report['suite']['description'])}</p>",
             f"<p>Examples: <code>{html.escape(ex['source'])}</code>, {ex['n']} documents in {len(ex['datasets'])} datasets, "
             f"sha256 <code>{ex['sha256'][:16]}</code>. Means over datasets; normalised = calibrated macro-F1 "
             f"rescaled so that 0 = uniform probabilities and 100 = gold. Timing: {html.escape(report['options']['timing'])}.</p>",
             "<h2>Leaderboard</h2>", _leaderboard(report), "<h2>Protocol</h2>", _protocol(report),
             "<h2>Escalation</h2>", _escalation(report)]
    if ok:
        parts.append(_img(coverage_png({a["name"]: a["coverage"] for a in ok}, targets, "all arms: coverage vs accuracy"),
                          "coverage of all arms"))
    parts += [_arm(a, report) for a in report["arms"]]
    parts.append(f"<h2>Receipt</h2><p><code>{report['receipt']['sha256']}</code><br><small>"
                 f"{html.escape(report['receipt']['covers'])}</small></p></body></html>")
    return "\n".join(parts)
