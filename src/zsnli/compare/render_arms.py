"""The per-arm views of a bake-off report, and the ceilings that pick an arm: HTML pieces of `zsnli.compare.render`.

Each arm of the ranking links to its view (``#arm-view-<rank>``, a ``<details>``): for a report of
``validate.py bakeoff`` its identity, coverage-vs-accuracy curve (PNG), reliability diagram, per-class F1
(weakest first), top confusions and worst slices (`cli_arm`); for an answer of ``POST /v1/bakeoff``, the
same from the answer's ``arm_details`` fields with the curve as inline SVG and a full confusion matrix (at
most `zsnli.compare.service.settings` labels, 20 by default) (`service_arms`). Every report, command line and
service alike, has the arm toggles (`toggles`) and the ceilings form (`ceilings`: the one set of
`zsnli.compare.engine.CEILINGS`, p95 latency, fit seconds and peak RSS, and the best-ranked ticked arm inside
them, computed here as rendered and again by ``report.js`` (`report_script`) as boxes are ticked or typed in).

User text goes through `zsnli.serving.text` (escaped, bidirectional controls shown, isolated in ``<bdi>``).

Imports: matplotlib (Agg, only for the CLI's coverage PNGs), `zsnli.serving.text`, `zsnli.compare.engine` (the
ceilings' rule).
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Callable, Sequence

from zsnli.compare.engine import CEILINGS, best_within, ceiling_figure
from zsnli.serving.text import html_attr as _e
from zsnli.serving.text import html_text as _u

WORST_CLASSES_SHOWN = 12


def fmt(x: Any, spec: str = ".3f") -> str:
    """A figure as text ("n/a" for None or NaN); other values as ``str`` (not escaped)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec) if spec and isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """HTML table; the first ``left`` columns are left-aligned; cells must already be escaped."""
    head = "".join(f"<th class='{'l' if i < left else ''}'>{h}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class='{'l' if i < left else ''}'>{c}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(png: bytes, alt: str) -> str:
    """An inline PNG (data URI) with its alt text escaped."""
    return f"<img alt='{_e(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>"


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


#: The square plots' geometry in pixels: side, left margin, top margin, room below (ticks and the axis name).
SQUARE = (150, 40, 6, 34)


def unit_square_svg(aria_label: str, css_class: str | None = None
                    ) -> tuple[Callable[[float], float], Callable[[float], float], list[str]]:
    """The frame of a 0..1 x 0..1 plot as inline SVG, shared by the reliability diagram
    (`zsnli.compare.render.reliability_svg`) and the coverage curve (`coverage_svg`): a 150-pixel square 40 px
    from the left and 6 from the top, 34 px below for the ticks. Returns ``(x, y, parts)``: the pixel of a value
    on each axis (rounded to 0.01) and the opening ``<svg>`` (``role='img'``, ``aria_label`` already escaped)
    and the square's ``<rect>``, to be extended and closed with ``</svg>``; `SQUARE` is its geometry."""
    size, left, top, bottom = SQUARE

    def x(v: float) -> float:
        return round(left + v * size, 2)

    def y(v: float) -> float:
        return round(top + (1 - v) * size, 2)

    css = f" class='{css_class}'" if css_class else ""
    return x, y, [f"<svg xmlns='http://www.w3.org/2000/svg' width='{left + size + 10}' height='{top + size + bottom}' "
                  f"role='img'{css} aria-label='{aria_label}'>",
                  f"<rect x='{left}' y='{top}' width='{size}' height='{size}' fill='#fff' stroke='#999'/>"]


def coverage_svg(arm: str, curve: dict[str, Sequence[float]]) -> str:
    """The coverage-vs-accuracy curve as inline SVG: x the share of examples kept (most confident first), y the
    accuracy of those kept; both axes 0..1, numbered at 0, 0.5 and 1; one dot per achievable coverage."""
    size, left, top, _ = SQUARE
    xs, ys = list(curve.get("coverage") or ()), list(curve.get("accuracy") or ())
    x, y, parts = unit_square_svg(f"coverage against accuracy of {_e(arm)}", css_class="coverage")
    for v in (0, 0.5, 1):
        parts.append(f"<text x='{x(v)}' y='{y(0) + 14}' text-anchor='middle' font-size='10'>{v:g}</text>"
                     f"<text x='{x(0) - 6}' y='{y(v) + 3}' text-anchor='end' font-size='10'>{v:g}</text>")
    if xs:
        points = " ".join(f"{x(a)},{y(b)}" for a, b in zip(xs, ys))
        parts.append(f"<polyline points='{points}' fill='none' stroke='#1a5fb4' stroke-width='1.6'/>")
        parts += [f"<circle cx='{x(a)}' cy='{y(b)}' r='1.8' fill='#1a5fb4'><title>keep {100 * a:.0f}%: accuracy "
                  f"{b:.2f}</title></circle>" for a, b in zip(xs, ys)]
    parts.append(f"<text x='{left + size / 2:g}' y='{top + size + 28}' text-anchor='middle' font-size='10'>share kept"
                 f"</text><text x='10' y='{top + size / 2:g}' font-size='10' transform='rotate(-90 10 {top + size / 2:g})'"
                 " text-anchor='middle'>accuracy kept</text></svg>")
    return "".join(parts)


# --------------------------------------------------------------------------- the CLI report's arm sections


def per_class_html(arm: dict) -> str:
    """Per-class F1 of a CLI report's arm: the `WORST_CLASSES_SHOWN` weakest, then all of them folded."""
    flat = [(ds, c) for ds, classes in arm["per_class"].items() for c in classes if c["support"] > 0]
    flat.sort(key=lambda t: (t[1]["f1"], -t[1]["support"]))

    def rows(items):
        return [[_u(ds), _u(c["label"]), str(c["support"]), fmt(c["precision"]), fmt(c["recall"]), fmt(c["f1"])]
                for ds, c in items]

    head = ["dataset", "class", "test rows", "precision", "recall", "F1"]
    return (f"<h3>Per-class F1: the {min(WORST_CLASSES_SHOWN, len(flat))} weakest of {len(flat)} classes</h3>"
            + table(head, rows(flat[:WORST_CLASSES_SHOWN]), left=2)
            + f"<details><summary>all {len(flat)} classes</summary>{table(head, rows(flat), left=2)}</details>")


def confusions_html(arm: dict) -> str:
    """The top (gold -> predicted) confusions of a CLI report's arm (readable at 72 labels, unlike a matrix)."""
    rows = [[_u(c["dataset"]), _u(c["gold"]), _u(c["predicted"]), str(c["count"]), fmt(100 * c["share_of_gold"], ".0f")]
            for c in arm["confusions"]]
    return ("<h3>Top confusions (gold &rarr; predicted)</h3>"
            + (table(["dataset", "gold", "predicted", "documents", "% of gold"], rows, left=3) if rows else "<p>none</p>"))


def slices_html(slices: Sequence[dict], min_support: int, accuracy: float | None) -> str:
    """The worst slices (``facet``, ``name``, ``n``, ``accuracy``, ``low``, ``high``, ``gap``, ``rank_score``)."""
    rows = [[_u(s["facet"]), _u(s["name"]), str(s["n"]), fmt(s["accuracy"]), f"{s['low']:.3f} &ndash; {s['high']:.3f}",
             fmt(s["gap"]), fmt(s["rank_score"], ".2f")] for s in slices[:15]]
    title = (f"<h3>Worst slices (n &ge; {min_support}; 95% Wilson top below the arm's accuracy {fmt(accuracy)}; "
             "ranked by gap &times; &radic;n)</h3>")
    return title + (table(["facet", "slice", "n", "accuracy", "95% interval", "gap", "gap x sqrt(n)"], rows, left=2)
                    if rows else "<p>none</p>")


def cli_arm(arm: dict, report: dict, rank: int, reliability: str) -> str:
    """One arm of a CLI report as an open ``<details id='arm-view-<rank>'>``; ``reliability``: its diagram (SVG)."""
    ident = ", ".join(f"{_e(k)}: <code>{_e(v)}</code>" for k, v in arm["identity"].items() if v not in (None, {}, ""))
    parts = [f"<details class='arm arm-view' id='arm-view-{rank}' open><summary><h2>{_u(arm['name'])} "
             f"<small>({arm['kind']}, {_e(arm['type'])})</small></h2></summary>",
             f"<p>{ident}</p><p><small>peak RSS: {_e(arm['rss_source'] or 'n/a')}; fit: {_e(arm['fit']['note'])}"
             "</small></p>"]
    if arm.get("error"):
        return "".join(parts) + f"<p class='err'>arm failed: {_e(arm['error'])}</p></details>"
    targets = [e["target"] for e in arm["escalation"]]
    parts.append("<div class='figs'>" + img(coverage_png({arm["name"]: arm["coverage"]}, targets,
                                                         f"{arm['name']}: coverage vs accuracy"),
                                            f"coverage of {arm['name']}") + reliability + "</div>")
    parts += [per_class_html(arm), confusions_html(arm),
              slices_html([{**s, "facet": f"{s['facet']} ({s['kind']})"} for s in arm["slices"]],
                          report["options"]["min_support"], arm["scores"]["pooled_accuracy"])]
    if arm.get("errors"):
        parts.append("<p class='err'>" + "<br>".join(_e(e) for e in arm["errors"][:5]) + "</p>")
    return "".join(parts) + "</details>"


# --------------------------------------------------------------------------- the service answer's arm views


def confusion_matrix_html(confusion: dict) -> str:
    """A K x K confusion matrix: rows the gold label, columns the predicted one; the diagonal in bold."""
    labels, counts = confusion["labels"], confusion["counts"]
    head = ["gold \u2193 / predicted \u2192", *(_u(x) for x in labels)]
    rows = [[_u(g), *(f"<b>{c}</b>" if i == j else str(c) for j, c in enumerate(counts[i]))]
            for i, g in enumerate(labels)]
    return "<h3>Confusion matrix</h3>" + table(head, rows).replace("<table>", "<table class='confusion'>", 1)


def service_arms(rows: Sequence[dict[str, Any]], entries: Sequence[dict[str, Any]],
                 diagram: Callable[[str, Sequence[dict]], str]) -> str:
    """A closed ``<details id='arm-view-<rank>'>`` per scored arm of a service answer: reliability diagram
    (``diagram``: `zsnli.compare.render.reliability_svg`), coverage curve, per-class F1, confusion matrix
    and worst slices (from the entry's `zsnli.compare.bakeoff_analysis.arm_details` fields; answers stored
    before they existed show the diagram only). ``rows``: `zsnli.compare.render.board`'s rows, in the order
    of ``entries`` (the scorecard)."""
    out = []
    for r, e in zip(rows, entries):
        if r["status"] != "scored":
            continue
        parts = [f"<details class='arm-view' id='arm-view-{r['rank']}'><summary>{_u(r['arm'])}: reliability, "
                 "coverage, per-class F1, confusions, worst slices</summary><div class='figs'>",
                 diagram(r["arm"], r["reliability"])]
        if "coverage" in e:
            parts.append(coverage_svg(r["arm"], e["coverage"]) + "</div>")
            pc = [[_u(c["label"]), str(c["support"]), fmt(c["precision"]), fmt(c["recall"]), fmt(c["f1"])]
                  for c in sorted(e["per_class"], key=lambda c: (c["f1"], -c["support"]))]
            parts += ["<h3>Per-class F1 (weakest first)</h3>" + table(["label", "examples", "precision", "recall", "F1"], pc),
                      confusion_matrix_html(e["confusion"]),
                      slices_html(e["slices"], 5, e.get("accuracy"))]
        else:
            parts.append("</div>")
        out.append("".join(parts) + "</details>")
    if not out:
        return ""
    return ("<h2>Arms</h2><p class='note'>Click an arm in the ranking (or below) to open its view.</p>" + "".join(out))


def ceilings(rows: Sequence[dict[str, Any]], limits: dict[str, float | None] | None = None) -> str:
    """The ceilings form of every report, command line and service alike: one number box per ceiling of
    `zsnli.compare.engine.CEILINGS` (p95 latency, fit seconds on these examples, peak RSS), filled with
    ``limits`` (the command line's ``--max-p95-ms`` / ``--max-fit-s`` / ``--max-rss-mb``; empty: no limit), and
    the best-ranked arm inside all of them (`zsnli.compare.engine.best_within`; with no ceiling, the winner).
    A ceiling on a figure no arm of the report has (peak RSS in a service bake-off, whose arms share the
    server's process; p95 latency in an answer stored before issue 57) is shown disabled, with the reason. ``report.js`` recomputes the pick as you type and
    as arms are ticked on or off (`toggles`)."""
    limits = {k: v for k, v in (limits or {}).items() if v is not None}
    best = best_within(rows, **limits)
    boxes = []
    for name, figure, label in CEILINGS:
        measured = any(ceiling_figure(r, figure) is not None for r in rows if r["status"] == "scored")
        value = f" value='{limits[name]!r}'" if name in limits else ""
        why = "" if measured else " disabled title='not measured in this bake-off'"
        boxes.append(f"<label>{_e(label)} <input type='number' min='0' step='any' id='{CEILING_IDS[name]}' "
                     f"data-figure='{figure}'{value}{why}></label>"
                     + ("" if measured else " <small>(not measured in this bake-off"
                                            + (": its arms share the server's process" if figure == "peak_rss_mb"
                                               else "") + ")</small>"))
    return ("<h2>Ceilings</h2><div class='ceilings' id='ceilings'>" + " ".join(boxes)
            + f"<p>Best arm within them: <b id='ceiling-best'>{_u(best) if best else 'no arm fits'}</b></p>"
            "<p class='note'>Latency is the p95 milliseconds to score one example; cost the seconds spent fitting the "
            "arm on these examples over all folds (0 for an arm that fits nothing here: zero-shot, or trained "
            "offline); memory the arm's peak RSS. An empty ceiling is no limit. The best arm is the first ticked arm "
            "in the ranking inside every ceiling (the command line's --max-p95-ms, --max-fit-s and --max-rss-mb are "
            "the same ceilings).</p></div>")


CEILING_IDS = {"max_p95_ms": "max-p95", "max_fit_s": "max-fit", "max_rss_mb": "max-rss"}
"""The ceilings form's box of each limit of `zsnli.compare.engine.CEILINGS` (``report.js`` reads them)."""


def toggles(rows: Sequence[dict[str, Any]]) -> str:
    """The arm toggles of every report: a ticked box per arm of the ranking; unticking one hides its row and leaves
    it out of the ceilings' pick (``report.js``). On the service's page ``bakeoff.js`` adds "Re-run bake-off",
    which runs the bake-off again on the same examples with the ticked arms."""
    boxes = "".join(f"<label class='arm'><input type='checkbox' name='arm-toggle' value='{_e(r['arm'])}' checked> "
                    f"{_u(r['arm'])}</label>" for r in rows)
    return (f"<fieldset class='arm-toggles' id='arm-toggles'><legend>Arms: tick on or off</legend>{boxes}"
            "</fieldset>")


def report_script() -> str:
    """``report.js``, the one script of the report (arm views, toggles, ceilings): inlined by
    `zsnli.compare.render.render_html`, served to the service's pages as ``/bakeoff/static/report.js``."""
    from importlib import resources

    return resources.files("zsnli.compare").joinpath("report.js").read_text(encoding="utf-8")
