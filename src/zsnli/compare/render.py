"""The one renderer of a bake-off report: JSON report -> HTML (`report_html`, `render_html`) and terminal
tables (`print_report`).

Both front ends' reports go through it. A report of ``validate.py bakeoff`` / ``compare`` has a
``leaderboard`` and per-arm ``arms`` entries (protocol, escalation, coverage, per-class F1, confusions,
slices); an answer of ``POST /v1/bakeoff`` has a ranked ``scorecard``, ``labels`` and a ``winner``.
`board` reads either into one row form, and each section is drawn when the report has its fields:
the ranking table (columns that some row has), the winner and tie note, one reliability diagram per
scored arm (inline SVG), the CLI's protocol, escalation and per-arm sections, and the receipt
(`zsnli.compare.receipts`). The CLI writes `render_html`; the service's result page embeds
`report_html` and ``GET /bakeoffs/{id}/report.html`` answers `render_html`.

Built for many labels: per-class F1 lists the weakest classes first (all of them folded under a
<details>), and confusions are the most frequent (gold -> predicted) pairs rather than a K x K matrix.

User text (labels, arm, dataset and slice names, the task) is escaped with its bidirectional controls shown
(``<U+202E>``) and isolated in ``<bdi>`` (`zsnli.serving.text.html_text`), so ``acc`` U+202E ``sse`` never
displays as "access".

Each scored arm's name in the ranking links to its view (`zsnli.compare.render_arms`: reliability, coverage,
per-class F1, confusions, worst slices). Both shapes get the same arm toggles and the same ceilings form (the
one set of `zsnli.compare.engine.CEILINGS`: p95 latency, fit seconds, peak RSS; the CLI's flags fill it) and the
one script (``report.js``, inlined by `render_html`, served to the service's pages): the CLI's HTML file and the
service's page differ only in the page's links, form and re-run button.

Imports: `zsnli.compare.render_arms` (the arm views; matplotlib through it), `zsnli.compare.engine` (rank rounding),
`zsnli.compare.arms` (which arms are fitted), `zsnli.compare.protocol` (the service's leave-one-out bound),
`zsnli.serving.text` (the display rule of user text; standard library only).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from zsnli.compare.arms import ARMS
from zsnli.compare.engine import CEILINGS, RANK_DECIMALS, ceiling_figure, ranking_rule
from zsnli.compare.protocol import SERVICE_PROTOCOL
from zsnli.compare.render_arms import (CEILING_IDS, SQUARE, ceilings, cli_arm, coverage_png, fmt, img, report_script,
                                       service_arms, toggles, unit_square_svg)
from zsnli.compare.render_arms import table as _table
from zsnli.serving.text import html_attr, html_text

SMALL_N = 30
"""Below this many examples, the page warns that one example moves accuracy by 100/n points."""
CSS = ("body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}"
       "table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}"
       "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f2f2f2}"
       "td.l,th.l{text-align:left}.arm{border-top:2px solid #444;margin-top:28px;padding-top:6px}"
       ".err{color:#b00}.figs img{margin-right:12px;vertical-align:top}small,.note{color:#666}"
       "summary{cursor:pointer;color:#1a5fb4}.winner{font-size:1.2em;padding:6px 10px;background:#e8f5e9;"
       "border-left:5px solid #2e7d32}.winner.tie{background:#fff8e1;border-left-color:#f9a825}"
       ".diagrams{display:flex;flex-wrap:wrap;gap:12px}.diagram h4{margin:0;font-size:13px}"
       ".receipt code{word-break:break-all}tr.failed td{color:#999}"
       ".winner.partial{background:#fff3e0;border-left-color:#ef6c00}")

#: The ranking table: (header, row key, number format); a column is shown when some row has its key.
COLUMNS = (("rank", "rank", "d"), ("arm", "arm", ""), ("role", "role", ""), ("kind", "kind", ""), ("type", "type", ""),
           ("macro-F1", "macro_f1", ".3f"), ("accuracy", "accuracy", ".3f"), ("ECE", "ece", ".3f"),
           ("cal. macro-F1", "calibrated_macro_f1", ".3f"), ("normalised", "normalised", ".1f"), ("n", "n", "d"),
           ("p50 ms", "p50_ms", ".1f"), ("p95 ms", "p95_ms", ".1f"), ("docs/s", "docs_per_s", ".1f"),
           ("fit s", "fit_s", ".1f"), ("peak RSS MiB", "peak_rss_mb", ".0f"), ("cost", "cost", ""),
           ("failed docs", "failed", "d"), ("status", "status", ""))
TEXT_COLUMNS = frozenset({"arm", "role", "kind", "type", "cost", "status"})


def _bins(reliability: Any) -> list[dict[str, Any]]:
    """Reliability bins as ``[{"lo", "hi", "count", "confidence", "accuracy"}]`` (non-empty bins) from either
    form: the service's list, or the CLI's ``{"edges", "counts", "confidence", "accuracy"}``."""
    if isinstance(reliability, list):
        return [b for b in reliability if b.get("count")]
    if not isinstance(reliability, dict):
        return []
    edges = reliability["edges"]
    return [{"lo": edges[b], "hi": edges[b + 1], "count": c, "confidence": reliability["confidence"][b],
             "accuracy": reliability["accuracy"][b]} for b, c in enumerate(reliability["counts"]) if c]


def board(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's ranking as rows with the keys of `COLUMNS` (those the report has) plus ``error`` and
    ``reliability`` (bins, see `_bins`), best first. Reads ``scorecard`` (service) or ``leaderboard`` (CLI)."""
    if "scorecard" in report:
        keep = ("rank", "arm", "role", "kind", "accuracy", "macro_f1", "ece", "n", "status", "error")
        return [{**{k: e.get(k) for k in keep if k in e or k != "kind"},  # answers before issue 57 have no kind
                 **({"fit_s": e["fit_s"]} if "fit_s" in e else {}),
                 **({"p95_ms": e["latency_ms_p95"]} if "latency_ms_p95" in e else {}),
                 "p50_ms": e.get("latency_ms_p50"),
                 "reliability": _bins(e.get("reliability"))} for e in report["scorecard"]]
    arms = {a["name"]: a for a in report.get("arms", [])}
    rows = []
    for k, r in enumerate(report["leaderboard"], 1):
        keep = {c[1]: r.get(c[1]) for c in COLUMNS if c[1] in r}
        rows.append({**keep, "rank": k, "status": "failed" if r.get("error") else "scored", "error": r.get("error"),
                     "fit_note": r.get("fit_note", ""),
                     "reliability": _bins(arms.get(r["arm"], {}).get("reliability"))})
    return rows


def columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The `COLUMNS` that some row has."""
    return [c for c in COLUMNS if any(c[1] in r for r in rows)]


def cell(row: dict[str, Any], key: str, spec: str) -> str:
    """One table cell as plain text (the terminal's and, escaped, the HTML's)."""
    if key == "status":
        return f"failed: {row['error']}" if row.get("error") else "scored"
    if key == "fit_s" and "offline" in row.get("fit_note", ""):  # nothing fitted on these examples (docs/bakeoff.md)
        return "trained offline"
    if key == "fit_s" and "replayed from the fit cache" in row.get("fit_note", ""):
        return fmt(row.get(key), spec) + " (replayed: seconds as trained)"
    return fmt(row.get(key), spec)


def n_examples(report: dict[str, Any]) -> int | None:
    """Examples behind the ranking: the answer's ``n``, or the CLI report's test rows (else its examples)."""
    if "n" in report:
        return report["n"]
    return (report.get("protocol") or {}).get("n_test_rows") or (report.get("examples") or {}).get("n")


def n_datasets(report: dict[str, Any]) -> int:
    """Datasets behind the ranking: a suite report's, or 1 for a service answer (the user's examples)."""
    return len((report.get("examples") or {}).get("datasets") or ()) or 1


def and_list(names: Sequence[Any]) -> str:
    """Names as an English list: "a", "a and b", "a, b and c"."""
    names = [str(n) for n in names]
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def tie_note(report: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str | None:
    """The sentence naming arms that tie with the first on macro-F1 (at `RANK_DECIMALS`) and the tie-break
    that ranked the first ahead (`ranking_rule`), or None when there is no tie."""
    scored = [r for r in rows if r["status"] == "scored" and r.get("macro_f1") is not None]
    top = [r for r in scored if round(r["macro_f1"], RANK_DECIMALS) == round(scored[0]["macro_f1"], RANK_DECIMALS)] \
        if scored else []
    if len(top) < 2:
        return None
    first, second = top[0], top[1]

    def differ(key: str) -> bool:
        a, b = first.get(key), second.get(key)
        return a is not None and b is not None and round(a, RANK_DECIMALS) != round(b, RANK_DECIMALS)

    by = "its lower ECE (calibration)" if differ("ece") else "its lower p50 latency" if differ("p50_ms") else "its name"
    n = n_examples(report)
    note = (f"Tie: {and_list(r['arm'] for r in top)} have the same macro-F1 "
            f"({fmt(first['macro_f1'])}) on these {n} examples; {first['arm']} is ranked first only by {by}.")
    return note + (" That is too few examples to tell them apart: add more examples." if n and n < SMALL_N else "")


def _fitted(row: dict[str, Any]) -> bool:
    """Whether a service row's arm is fitted: its ``fit_s`` is set (answers since issue 52), else its registry type trains."""
    if "fit_s" in row:
        return row["fit_s"] is not None
    return row["arm"] in ARMS and ARMS[row["arm"]].trains


def few_shot_note(report: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str | None:
    """Why few-shot arms (registry arms that are fitted, ``trains``) scored at or below chance on a service
    bake-off of few examples (at most the service's leave-one-out bound), or None when none did. Under
    leave-one-out the fit that scores an example lacks it, so its label is under-represented there: with about
    balanced labels the majority of the others is always another label (majority: accuracy 0), and the other
    fitted arms have one or two texts a label to learn from. That is the protocol saying the examples are too
    few, not the arms being worse than guessing."""
    n, k = report.get("n") or 0, max(1, len(report.get("labels") or ()))
    low = [r["arm"] for r in rows if _fitted(r) and r["status"] == "scored"
           and r.get("accuracy") is not None and r["accuracy"] <= 1 / k]
    if "id" not in report or not low or n > SERVICE_PROTOCOL["loo_max_n"]:
        return None
    per_label = (n - 1) / k
    return (f"{and_list(low)} scored at or below chance ({1 / k:.3f} for {k} labels) because the examples are "
            f"few, not because {'it guesses' if len(low) == 1 else 'they guess'} worse than chance: each of the "
            f"{n} examples is scored by a fit on the other {n - 1} (leave-one-out), in which its own label has lost "
            "that example: with labels about balanced, the majority of the others is then another label, and a "
            f"fitted arm has about {per_label:.0f} text{'s' if round(per_label) != 1 else ''} a label to learn from. "
            "Few-shot arms need more: about 5 examples per label or more.")


def not_finished(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of arms that did not finish (failed, stopped by a time budget, never started), in ranking order."""
    return [r for r in rows if r["status"] != "scored"]


def winner_line(report: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    """The verdict, wherever a winner is named (the page's banner, the terminal, the JSON's ``verdict``):
    "Winner: ARM (macro-F1, ECE, p50)" of the first row, "(by a tie-break)" when it tied. When some arms did not
    finish, no winner is named without saying so: "Winner among 5 of 11 arms: ARM (...); 6 did not finish: A, B,
    ..." (the reasons: `not_finished`). No scored arm: "No arm was scored", with the arms that did not finish."""
    missing = not_finished(rows)
    names = ", ".join(str(r["arm"]) for r in missing)
    if not rows or rows[0]["status"] != "scored":
        return "No arm was scored" + (f": {len(missing)} of {len(rows)} arms did not finish ({names})." if rows else ".")
    w = rows[0]
    tie = " (by a tie-break)" if tie_note(report, rows) else ""
    among = f" among {len(rows) - len(missing)} of {len(rows)} arms" if missing else ""
    line = (f"Winner{among}{tie}: {w['arm']} (macro-F1 {fmt(w['macro_f1'])}, ECE {fmt(w['ece'])}, "
            f"p50 {fmt(w['p50_ms'], '.1f')} ms)")
    return line + (f"; {len(missing)} did not finish: {names}" if missing else "")


# --------------------------------------------------------------------------- HTML


def _e(x: Any) -> str:
    """Escaped text with bidirectional controls shown (``<U+202E>``): `zsnli.serving.text.html_attr`."""
    return html_attr(x)


def _u(x: Any) -> str:
    """User text (arm, label, dataset, slice names; the task) as content: shown and isolated in ``<bdi>``
    (`zsnli.serving.text.html_text`)."""
    return html_text(x)


def reliability_svg(arm: str, bins: Sequence[dict[str, Any]]) -> str:
    """A reliability diagram as inline SVG: per confidence bin a bar at its accuracy and a red dot at (its mean
    confidence, its accuracy), against the dashed diagonal, so a dot lies on the diagonal only where the bin
    is calibrated (a bin at zero accuracy has its dot on the floor); a bin without an accuracy has no dot;
    both axes 0..1, numbered at 0, 0.5 and 1 (``text.tick-x/y``)."""
    size, left, top, _ = SQUARE
    x, y, parts = unit_square_svg(f"reliability diagram of {_e(arm)}")
    for v in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f"<line x1='{x(v)}' y1='{y(0)}' x2='{x(v)}' y2='{y(0) + 4}' stroke='#666'/>"
                     f"<line x1='{x(0) - 4}' y1='{y(v)}' x2='{x(0)}' y2='{y(v)}' stroke='#666'/>")
        if v in (0, 0.5, 1):
            parts.append(f"<text x='{x(v)}' y='{y(0) + 14}' text-anchor='middle' font-size='10' class='tick-x'>{v:g}</text>"
                         f"<text x='{x(0) - 6}' y='{y(v) + 3}' text-anchor='end' font-size='10' class='tick-y'>{v:g}</text>")
    parts.append(f"<line x1='{x(0)}' y1='{y(0)}' x2='{x(1)}' y2='{y(1)}' stroke='#bbb' stroke-dasharray='4 3'/>")
    for b in bins:
        acc, conf = b["accuracy"] or 0.0, b["confidence"] or 0.0
        dot = (f"<circle cx='{x(conf)}' cy='{y(acc)}' r='2.5' fill='#e53935'/>"
               if b["accuracy"] is not None and b["confidence"] is not None else "")
        parts.append(f"<rect x='{x(b['lo']) + 1}' y='{y(acc)}' width='{max(1.0, round((b['hi'] - b['lo']) * size - 2, 2))}'"
                     f" height='{round(acc * size, 2)}' fill='#42a5f5' opacity='0.8'><title>confidence {conf:.2f}, "
                     f"accuracy {acc:.2f}, n = {b['count']}</title></rect>{dot}")
    parts.append(f"<text x='{left + size / 2:g}' y='{top + size + 28}' text-anchor='middle' font-size='10'>confidence</text>"
                 f"<text x='10' y='{top + size / 2:g}' font-size='10' transform='rotate(-90 10 {top + size / 2:g})' "
                 "text-anchor='middle'>accuracy</text></svg>")
    return "".join(parts)


def _ranking(report: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    cols = columns(rows)
    head = "".join(f"<th class='{'l' if key in TEXT_COLUMNS else ''}'>{_e(h)}</th>" for h, key, _ in cols)
    body = "".join(f"<tr class='{r['status']}' data-arm='{_e(r['arm'])}' data-rank='{r['rank']}'{_ceiling_data(r)}>"
                   + "".join(f"<td class='{'l' if key in TEXT_COLUMNS else ''}'>{_arm_cell(r, key, spec)}</td>"
                             for _, key, spec in cols) + "</tr>" for r in rows)
    out = (f"<h2>Ranking</h2><table id='scorecard'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
           f"<p class='note'>Ranked by {_e(ranking_rule(n_datasets(report)))}.</p>")
    note = few_shot_note(report, rows)
    if note:
        out += f"<p class='note' id='few-shot-note'>{_u(note)}</p>"
    return out


def _ceiling_data(row: dict[str, Any]) -> str:
    """The row's figures under the ceilings (`zsnli.compare.engine.ceiling_figure`) as ``data-ceiling-*`` attributes
    (``report.js`` reads them; empty: not measured)."""
    return "".join(f" data-ceiling-{figure.replace('_', '-')}='{_num(ceiling_figure(row, figure))}'"
                   for _, figure, _ in CEILINGS)


def _num(x: Any) -> str:
    """A figure for a data attribute (``bakeoff.js`` reads it): the float's repr, or empty when missing."""
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else repr(float(x))


def _arm_cell(row: dict[str, Any], key: str, spec: str) -> str:
    """A ranking cell as HTML; a scored arm's name links to its view (`zsnli.compare.render_arms`)."""
    if key != "arm":
        return _e(cell(row, key, spec))
    if row["status"] != "scored":
        return _u(row["arm"])
    return f"<a class='arm-link' href='#arm-view-{row['rank']}'>{_u(row['arm'])}</a>"


def _summary(report: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    tie, n, missing = tie_note(report, rows), n_examples(report), not_finished(rows)
    kind = " partial" if missing else " tie" if tie else ""
    out = f"<div class='winner{kind}' id='winner'>{_e(winner_line(report, rows))}</div>"
    if missing:
        out += ("<p class='note' id='not-finished'>Not a full ranking: these arms did not finish, so the winner is "
                "the best of the others only.</p><ul class='not-finished'>"
                + "".join(f"<li>{_u(r['arm'])}: {_e(r.get('error') or 'did not finish')}</li>" for r in missing)
                + "</ul>")
    if tie:
        out += f"<p class='tie-note' id='tie-note'>{_e(tie)}</p>"
    elif n and n < SMALL_N:
        out += (f"<p class='note' id='small-n'>With {n} examples one example moves accuracy by {100 / n:.1f} points: "
                "treat small differences as noise.</p>")
    return out


HEADING_TASK_CHARS = 80  #: characters of the task the result heading shows (all of it: the paragraph under it)


def heading_task(task: str) -> str:
    """The task as the result page's heading shows it: its first line, cut at `HEADING_TASK_CHARS` characters
    (on a word where one ends near the cut) with an ellipsis; ``untitled`` when it is blank."""
    first = " ".join((task or "").split("\n", 1)[0].split())
    if len(first) <= HEADING_TASK_CHARS:
        return first or "untitled"
    cut = first[:HEADING_TASK_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > HEADING_TASK_CHARS // 2 else cut).rstrip() + "\u2026"


def _header(report: dict[str, Any]) -> str:
    if "id" in report:  # a service answer
        labels = ", ".join(_u(k) if k == v else f"{_u(k)} (\u201c{_u(v)}\u201d)" for k, v in report["labels"].items())
        return (f"<h1>Bake-off: {_u(heading_task(report['task_description']))}</h1>"
                f"<p class='task'>{_u(report['task_description'])}</p>"
                f"<p>{report['n']} examples; labels: {labels}; created {_e(report['created_at'])}; "
                f"id <code>{_e(report['id'])}</code>.</p>")
    ex = report["examples"]
    return (f"<h1>Bake-off: suite {_u(report['suite']['name'])}</h1><p>{_u(report['suite']['description'])}</p>"
            f"<p>Examples: <code>{_e(ex['source'])}</code>, {ex['n']} documents in {len(ex['datasets'])} datasets, "
            f"sha256 <code>{_e(ex['sha256'][:16])}</code>. {'Means over datasets; ' if len(ex['datasets']) > 1 else ''}"
            f"normalised = calibrated macro-F1 "
            f"rescaled so that 0 = uniform probabilities and 100 = gold. Timing: {_e(report['options']['timing'])}.</p>")


def _diagrams(rows: Sequence[dict[str, Any]]) -> str:
    shown = [r for r in rows if r["status"] == "scored"]
    if not shown:
        return ""
    return ("<h2>Reliability</h2><p class='note'>Bars: accuracy per confidence bin; red dots: mean confidence; "
            "dashed: perfect calibration.</p><div class='diagrams'>"
            + "".join(f"<div class='diagram'><h4>{_u(r['arm'])} \u00b7 ECE {fmt(r['ece'])}</h4>"
                      f"{reliability_svg(r['arm'], r['reliability'])}</div>" for r in shown) + "</div>")


def _receipt(report: dict[str, Any]) -> str:
    r = report.get("receipt")
    if not isinstance(r, dict):
        return ""
    signed = r.get("signature") is not None
    items = [("sha256", f"<code id='receipt-sha256'>{_e(r.get('sha256'))}</code>"),
             ("Ed25519 signature", f"<code>{_e(r['signature'])}</code>" if signed else "none (unsigned: sha256 only)")]
    if signed:
        items.append(("key id", f"<code>{_e(r.get('key_id'))}</code>"))
    items.append(("examples sha256", f"<code>{_e(r.get('examples_sha256'))}</code>"))
    return ("<h2>Receipt</h2><dl class='receipt' id='receipt'>"
            + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"
            "<p class='note'>It covers every field of this report, the examples' sha256 and each arm's model, "
            "calibration and code hashes. Check it offline: <code>python validate.py verify-receipt REPORT.json"
            f"{' --public-key key.pem' if signed else ' --allow-unsigned'}</code>"
            f"{'' if signed else ' (an unsigned receipt is accepted only by that flag: anyone can recompute a sha256)'}"
            ".</p>")


def _protocol(report: dict) -> str:
    rows = [[_u(ds), m["method"], str(m["folds"]), str(m["n"]), str(m["n_test"]), fmt(m["train_per_fold"], ".1f")]
            for ds, m in report["protocol"]["per_dataset"].items()]
    return (f"<h2>Protocol</h2><p>{_e(report['protocol']['description'])}</p>"
            + _table(["dataset", "method", "folds", "rows", "test rows", "training rows per fit"], rows))


def _escalation(report: dict) -> str:
    rows = []
    for a in report["arms"]:
        for e in a.get("escalation", []):
            rows.append([_u(a["name"]), fmt(e["target"], ".2f"),
                         fmt(e["threshold"], ".4f") if e["reachable"] else "unreachable",
                         fmt(100 * e["kept_fraction"], ".1f"), fmt(100 * e["escalated_fraction"], ".1f"),
                         fmt(e["kept_accuracy"])])
    out = "<h2>Escalation</h2>" + _table(["arm", "target accuracy", "threshold", "% kept", "% to a person",
                                          "kept accuracy"], rows)
    ok = [a for a in report["arms"] if not a.get("error")]
    if ok:
        out += img(coverage_png({a["name"]: a["coverage"] for a in ok}, report["options"]["targets"],
                                 "all arms: coverage vs accuracy"), "coverage of all arms")
    return out


def report_html(report: dict[str, Any]) -> str:
    """The report as an HTML fragment (``<div class='report'>``): header, winner, arm toggles, ranking, ceilings,
    reliability diagrams, the service answer's arm views or the CLI report's protocol / escalation / per-arm
    sections, receipt: the same toggles and ceilings for both shapes (`zsnli.compare.render_arms`). Every text
    from the report is escaped. Raises ``KeyError`` on a report without the fields of either shape (module
    docstring)."""
    rows = board(report)
    limits = {k: v for k, v in (report.get("constraints") or {}).items() if k in CEILING_IDS}
    parts = [_header(report), _summary(report, rows), toggles(rows), _ranking(report, rows), ceilings(rows, limits),
             _diagrams(rows)]
    if "scorecard" in report:
        parts.append(service_arms(rows, report["scorecard"], reliability_svg))
    if "protocol" in report:
        by_name = {r["arm"]: r for r in rows}
        parts += [_protocol(report), _escalation(report)] + [
            cli_arm(a, report, by_name[a["name"]]["rank"], reliability_svg(a["name"], by_name[a["name"]]["reliability"]))
            for a in report["arms"]]
    parts.append(_receipt(report))
    return "<div class='report'>" + "\n".join(parts) + "</div>"


def render_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (`report_html`; PNG figures inlined as data URIs; the report's
    script, `zsnli.compare.render_arms.report_script`, inlined: toggles and ceilings work from the file)."""
    title = report["id"] if "id" in report else f"suite {report['suite']['name']}"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>zsnli bake-off: {_e(title)}</title>"
            f"<style>{CSS}</style></head><body>{report_html(report)}<script>{report_script()}</script></body></html>")


# --------------------------------------------------------------------------- terminal


def print_report(report: dict[str, Any], console) -> None:
    """The ranking (the HTML's columns), constraint pick, escalation and top slices per arm as rich tables."""
    from rich.table import Table

    rows = board(report)
    title = report["protocol"]["description"] if "protocol" in report else f"{n_examples(report)} examples"
    lb = Table(title=f"Ranking: {title}")
    cols = columns(rows)
    for header, key, _ in cols:
        lb.add_column(header, justify="left" if key in TEXT_COLUMNS else "right")
    for r in rows:
        lb.add_row(*(cell(r, key, spec) for _, key, spec in cols))
    console.print(lb)
    console.print(winner_line(report, rows), markup=False, soft_wrap=True)
    for r in not_finished(rows):
        console.print(f"  did not finish: {r['arm']}: {r.get('error') or 'no result'}", markup=False, soft_wrap=True)
    tie = tie_note(report, rows)
    if tie:
        console.print(tie, markup=False, soft_wrap=True)
    if "protocol" in report:
        _print_cli_sections(report, console)
    r = report.get("receipt") or {}
    signed = f"signed by key {r.get('key_id')}" if r.get("signature") else "unsigned"
    console.print(f"receipt sha256: {r.get('sha256')} ({signed})", markup=False, soft_wrap=True)


def _print_cli_sections(report: dict[str, Any], console) -> None:
    from rich.table import Table

    c = report["constraints"]
    given = [(label, c[name]) for name, _, label in CEILINGS if c.get(name) is not None]
    if given:
        console.print(f"best within {', '.join(f'{label} <= {v:g}' for label, v in given)}: "
                      f"{c['best'] or 'no arm fits'}", markup=False, soft_wrap=True)
    esc = Table(title="Escalation: lowest confidence threshold whose kept documents reach the target accuracy")
    for col in ("arm", "target", "threshold", "% kept", "% to a person", "kept acc."):
        esc.add_column(col, justify="left" if col == "arm" else "right")
    for a in report["arms"]:
        for e in a.get("escalation", []):
            esc.add_row(a["name"], fmt(e["target"], ".2f"), fmt(e["threshold"], ".4f") if e["reachable"] else "unreachable",
                        fmt(100 * e["kept_fraction"], ".1f"), fmt(100 * e["escalated_fraction"], ".1f"),
                        fmt(e["kept_accuracy"]))
    console.print(esc)
    sl = Table(title=f"Worst slices (n >= {report['options']['min_support']}, Wilson 95% top below the arm's accuracy; "
                     "ranked by gap x sqrt(n); top 5 per arm)")
    for col in ("arm", "slice", "kind", "n", "acc.", "95% interval", "arm acc.", "gap x sqrt(n)"):
        sl.add_column(col, justify="left" if col in ("arm", "slice", "kind") else "right")
    for a in report["arms"]:
        if a.get("error"):
            console.print(f"arm {a['name']} failed: {a['error']}", markup=False, soft_wrap=True)
            continue
        for s in a["slices"][:5] or [None]:
            if s is None:
                sl.add_row(a["name"], "(none)", "", "", "", "", fmt(a["scores"]["pooled_accuracy"]), "")
            else:
                sl.add_row(a["name"], f"{s['facet']}={s['name']}"[:60], s["kind"], str(s["n"]), fmt(s["accuracy"]),
                           f"{s['low']:.3f}-{s['high']:.3f}", fmt(a["scores"]["pooled_accuracy"]), fmt(s["rank_score"], ".2f"))
    console.print(sl)
