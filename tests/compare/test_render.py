"""The one report renderer (`zsnli.compare.render`): both report shapes, winner and tie note, reliability
diagrams, receipts, escaping; the service's pages serve its output. (The CLI's and the service's HTML of one
bake-off: test_engine_parity.)"""

from __future__ import annotations

import re

import pytest

from zsnli.compare.render import board, render_html, report_html, tie_note

HOSTILE = "<!--<script>alert(1)</script> & \u2028"


def service_answer(scores: dict[str, tuple[float, float, float]], n: int, task: str = "t") -> dict:
    """A bake-off answer with these arms (macro-F1, ECE, p50 ms), ranked as the server ranks them."""
    order = sorted(scores, key=lambda a: (-scores[a][0], scores[a][1], scores[a][2]))
    bins = [{"lo": 0.5, "hi": 0.6, "confidence": 0.55, "accuracy": 0.5, "count": n}]
    card = [{"arm": a, "rank": i + 1, "role": "incumbent", "status": "scored", "accuracy": scores[a][0],
             "macro_f1": scores[a][0], "ece": scores[a][1], "latency_ms_p50": scores[a][2], "n": n,
             "reliability": bins} for i, a in enumerate(order)]
    return {"id": "bo_" + "0" * 32, "n": n, "labels": {"access": "access", "billing": "money matters"},
            "created_at": "2026-01-01T00:00:00Z", "winner": order[0], "scorecard": card, "task_description": task,
            "receipt": {"version": 3, "sha256": "s" * 64, "signature": "g", "key_id": "k", "examples_sha256": "e",
                        "arms": {}}}


def ranking(page: str) -> dict[str, dict[str, str]]:
    """The ranking table of a rendered report: arm -> {column header: cell text}."""
    table = re.search(r"<table id='scorecard'>(.*?)</table>", page, re.S).group(1)
    heads = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table)
    rows = re.findall(r"<tr class='\w+' data-arm='([^']*)'[^>]*>(.*?)</tr>", table, re.S)
    return {arm: dict(zip(heads, (re.sub(r"</?a[^>]*>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", cells))))
            for arm, cells in rows}


def test_a_tie_broken_on_a_handful_of_examples_is_flagged():
    answer = service_answer({"tfidf_logreg": (0.75, 0.10, 3.0), "majority": (0.75, 0.25, 0.1),
                             "served": (0.5, 0.1, 20.0)}, 4)
    page = report_html(answer)
    assert re.search(r"id='winner'>Winner \(by a tie-break\): tfidf_logreg ", page)
    note = tie_note(answer, board(answer))
    assert "same macro-F1 (0.750) on these 4 examples" in note and "lower ECE" in note and "add more examples" in note
    assert f"id='tie-note'>{note}" in page
    page = report_html(service_answer({"tfidf_logreg": (0.9, 0.1, 3.0), "majority": (0.5, 0.2, 0.1)}, 10))
    assert "id='winner'>Winner: tfidf_logreg (macro-F1 0.900, ECE 0.100, p50 3.0 ms)" in page
    assert "tie-note" not in page and "one example moves accuracy by 10.0 points" in page


def test_ties_are_judged_at_the_ranking_rules_four_decimals():
    tied = service_answer({"a": (0.80001, 0.1, 1.0), "b": (0.80004, 0.2, 1.0)}, 50)
    note = tie_note(tied, board(tied))
    assert "lower ECE" in note and "add more examples" not in note
    apart = service_answer({"a": (0.8, 0.1, 1.0), "b": (0.7, 0.1, 1.0)}, 50)
    assert tie_note(apart, board(apart)) is None


def test_a_tie_of_three_names_them_as_an_english_list():
    """The note read "served and served_about, embedding_similarity have the same macro-F1"."""
    from zsnli.compare.render import and_list

    three = service_answer({"served": (0.8, 0.1, 1.0), "served_about": (0.8, 0.2, 1.0),
                            "embedding_similarity": (0.8, 0.3, 1.0), "majority": (0.3, 0.3, 0.1)}, 50)
    assert tie_note(three, board(three)).startswith(
        "Tie: served, served_about and embedding_similarity have the same macro-F1 (0.800)")
    assert [and_list(n) for n in (["a"], ["a", "b"], ["a", "b", "c", "d"])] == ["a", "a and b", "a, b, c and d"]


def test_an_arm_trained_offline_reads_the_same_in_the_terminal_the_html_and_the_docs_table():
    """The served arm's fit column was "3600.0 (offline)" in the terminal and HTML, "trained offline" in
    docs/bakeoff.md's table: it fitted nothing on these examples (`--max-fit-s` counts it as 0)."""
    from zsnli.bench.doc_tables import ranking_table
    from zsnli.compare.render import cell

    report = _cli_report()
    served = report["leaderboard"][0]
    assert cell(served, "fit_s", ".1f") == "trained offline"
    assert re.search(r"<td[^>]*>trained offline</td>", render_html(report))
    docs_row = ranking_table({"leaderboard": [dict(served, calibrated_macro_f1=0.5, normalised=1.0,
                                                   docs_per_s=1.0)]}).splitlines()[-1]
    assert "| trained offline |" in docs_row and "3600" not in render_html(report)


def test_reliability_diagrams_have_numbered_axes_one_per_scored_arm():
    answer = service_answer({"tfidf_logreg": (0.9, 0.1, 3.0), "majority": (0.5, 0.2, 0.1)}, 10)
    answer["scorecard"][1].update(status="failed", error="boom", macro_f1=None, accuracy=None, ece=None)
    page = report_html(answer)
    svgs = re.findall(r"<div class='diagram'>.*?</svg>", page, re.S)
    assert len(svgs) == 1 and "reliability diagram of tfidf_logreg" in svgs[0]
    assert re.findall(r"class='tick-x'>([^<]*)<", svgs[0]) == ["0", "0.5", "1"]
    assert re.findall(r"class='tick-y'>([^<]*)<", svgs[0]) == ["0", "0.5", "1"]
    assert ranking(page)["majority"]["status"] == "failed: boom"


def test_both_report_shapes_render_their_columns():
    answer = service_answer({"served": (0.9, 0.1, 3.0)}, 3)
    assert list(ranking(report_html(answer))["served"]) == ["rank", "arm", "role", "macro-F1", "accuracy", "ECE", "n",
                                                            "p50 ms", "status"]
    cli = {"examples": {"source": "x.jsonl", "sha256": "e" * 64, "n": 40, "datasets": ["support"]},
           "suite": {"name": "ci", "description": "d"}, "options": {"timing": "one per call"},
           "arms": [{"name": "tfidf", "reliability": {"edges": [0, 0.5, 1], "counts": [0, 4],
                                                      "confidence": [None, 0.8], "accuracy": [None, 0.75]}}],
           "leaderboard": [{"arm": "tfidf", "kind": "few-shot", "type": "tfidf_logreg", "macro_f1": 0.7, "accuracy": 0.75,
                            "ece": 0.05, "p50_ms": 1.5, "fit_s": 0.2, "fit_note": "", "cost": "CPU", "error": None,
                            "failed": 0}],
           "receipt": {"sha256": "s" * 64, "signature": None, "key_id": None, "examples_sha256": "e" * 64}}
    page = render_html(cli)
    row = ranking(page)["tfidf"]
    assert list(row) == ["rank", "arm", "kind", "type", "macro-F1", "accuracy", "ECE", "p50 ms", "fit s", "cost",
                         "failed docs", "status"]
    assert row["macro-F1"] == "0.700" and row["status"] == "scored"
    assert page.count("aria-label='reliability diagram of tfidf'") == 1 and "unsigned: sha256 only" in page


def test_report_text_is_escaped():
    answer = service_answer({HOSTILE: (0.9, 0.1, 3.0)}, 3, task=HOSTILE)
    answer["labels"] = {HOSTILE: HOSTILE}
    page = render_html(answer)
    from zsnli.compare.render_arms import report_script

    # the one script is the report's own (inlined from report.js); nothing of the answer is markup
    assert page.count("<script") == 1 and f"<script>{report_script()}</script>" in page and "<!--" not in page
    assert "&lt;!--&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in page


def test_the_service_pages_serve_the_one_renderer():
    from zsnli.compare.service.page import report_file, result_page

    answer = service_answer({"served": (0.9, 0.1, 3.0), "majority": (0.5, 0.2, 0.1)}, 10, task=HOSTILE)
    assert report_file(answer) == render_html(answer)
    page = result_page(answer, None)
    assert report_html(answer) in page and page.count("<script") == 2  # report.js, bakeoff.js: nothing from the answer
    assert "<script src='/bakeoff/static/report.js'></script><script src='/bakeoff/static/bakeoff.js'>" in page
    assert "id='badge-markdown'>[![bake-off](/bakeoffs/bo_" in page
    public = result_page(answer, "https://zsnli.example.com/x/")
    assert "[![bake-off](https://zsnli.example.com/x/bakeoffs/bo_" in public


def test_a_report_of_neither_shape_is_a_key_error():
    with pytest.raises(KeyError):
        report_html({"receipt": {}})


def test_one_dataset_is_not_called_a_mean_over_datasets():
    """Issue 40 (9): a service bake-off (the user's examples, one dataset) ranks by its own figures."""
    from zsnli.compare.engine import RANKING_RULE

    page = report_html(service_answer({"served": (0.9, 0.1, 3.0), "majority": (0.5, 0.2, 0.1)}, 10))
    assert "Ranked by macro-F1 (higher first), then ECE (lower first)" in page and "over datasets" not in page
    assert "mean over datasets" in RANKING_RULE  # a suite over several datasets still says so


def test_few_shot_arms_at_chance_on_few_examples_are_explained():
    """Issue 40 (9): majority / tf-idf at 0.000 under leave-one-out on 3 examples get the reason beside them;
    a zero-shot arm at 0, or few-shot arms on more examples than leave-one-out covers, get none."""
    from zsnli.compare.render import few_shot_note
    from zsnli.compare.service.page import LOO_MAX_N, result_page

    def note_of(answer):
        return few_shot_note(answer, board(answer))

    answer = service_answer({"served": (1.0, 0.01, 40.0), "majority": (0.0, 0.67, 0.02),
                             "tfidf_logreg": (0.0, 0.67, 0.8), "embedding_logreg": (0.6667, 0.6, 9.0)}, 3)
    note = note_of(answer)
    assert note.startswith("majority and tfidf_logreg scored at or below chance (0.500 for 2 labels)")
    assert "each of the 3 examples is scored by a fit on the other 2 (leave-one-out)" in note
    assert "embedding_logreg" not in note
    page = report_html(answer)  # under the ranking table, before the diagrams; the result page embeds it
    assert page.index("id='few-shot-note'") < page.index("<h2>Reliability</h2>")
    assert "id='few-shot-note'" in result_page(answer, None)
    assert note_of(service_answer({"served": (0.0, 0.5, 40.0), "majority": (0.75, 0.2, 0.02)}, 4)) is None
    many = service_answer({"served": (1.0, 0.01, 40.0), "majority": (0.0, 0.6, 0.02)}, LOO_MAX_N + 1)
    assert note_of(many) is None and "few-shot-note" not in result_page(many, None)


def test_the_result_heading_shows_the_task_and_zero_accuracy_dots_sit_on_the_floor():
    """Issue 49: the heading is the task (cut on a word), not the raw id; a bin's dot is at (confidence,
    accuracy), so an arm at zero accuracy has no dot on the diagonal where it would look calibrated."""
    from zsnli.compare.render import HEADING_TASK_CHARS, heading_task, reliability_svg

    page = report_html(service_answer({"a": (0.9, 0.1, 3.0)}, 10, task="Route support tickets: access or billing"))
    assert "<h1>Bake-off: <bdi>Route support tickets: access or billing</bdi></h1>" in page
    assert "<h1>Bake-off bo_" not in page and "id <code>bo_" in page
    long = heading_task("word " * 40)
    assert len(long) <= HEADING_TASK_CHARS + 1 and long.endswith("\u2026") and not long.endswith(" \u2026")
    assert heading_task("  \n") == "untitled"
    svg = reliability_svg("wrong", [{"lo": 0.9, "hi": 1.0, "confidence": 0.95, "accuracy": 0.0, "count": 5}])
    (cx, cy), = [tuple(map(float, m)) for m in re.findall(r"<circle cx='([\d.]+)' cy='([\d.]+)'", svg)]
    assert cy == 156.0 and cx == 40 + 0.95 * 150  # on the x axis (accuracy 0), not at y(0.95) on the diagonal
    assert "<circle" not in reliability_svg("none", [{"lo": 0.0, "hi": 0.1, "confidence": None, "accuracy": None,
                                                      "count": 1}])


def test_each_service_arm_has_a_view_and_the_ceilings_name_the_best_arm_inside_both():
    import numpy as np

    from zsnli.compare.bakeoff_analysis import arm_details
    from zsnli.compare.engine import best_within

    answer = service_answer({"served": (0.9, 0.1, 30.0), "tfidf_linearsvc": (0.8, 0.1, 1.0),
                             "majority": (0.5, 0.2, 0.1)}, 4)
    gold, names = [0, 0, 1, 1], ["access", "billing"]
    probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.3, 0.7]])
    for e, fit in zip(answer["scorecard"], (None, 2.5, 0.01)):
        e.update(fit_s=fit, latency_ms_p95=2 * e["latency_ms_p50"],
                 **arm_details(probs, gold, probs.argmax(1), names, ["a b", "c", "d e f", "g"]))
    page = report_html(answer)
    assert re.findall(r"href='#arm-view-(\d)'", page) == ["1", "2", "3"]  # each ranked arm links to its view
    view = re.search(r"<details class='arm-view' id='arm-view-2'>.*?</details>", page, re.S).group(0)
    assert "reliability diagram of tfidf_linearsvc" in view and "coverage against accuracy of tfidf_linearsvc" in view
    matrix = re.search(r"<table class='confusion'>(.*?)</table>", view, re.S).group(1)
    assert re.findall(r"<td class=''>(?:<b>)?(\d)", matrix) == ["1", "1", "0", "2"]  # gold rows, predicted columns
    assert "Per-class F1" in view and "Worst slices" in view
    rows = board(answer)
    assert re.search(r"id='ceiling-best'>(.*?)</b>", page).group(1) == "<bdi>served</bdi>"
    assert best_within(rows, max_p95_ms=10.0) == "tfidf_linearsvc"  # served's p95 (60 ms) is over the ceiling
    assert best_within(rows, max_p95_ms=10.0, max_fit_s=1.0) == "majority"  # and tf-idf over the cost ceiling
    assert best_within(rows, max_fit_s=0.0) == "served"  # nothing fitted costs nothing
    assert best_within(rows, max_p95_ms=0.01) is None
    assert best_within(rows, max_rss_mb=1e9) is None  # a service bake-off measures no arm's memory
    assert "id='max-rss' data-figure='peak_rss_mb' disabled" in page  # so its box is off, and says why


def _cli_report(constraints=None) -> dict:
    def row(arm, kind, f1, p95, fit, rss, note=""):
        return {"arm": arm, "kind": kind, "type": arm, "macro_f1": f1, "accuracy": f1, "ece": 0.1, "p50_ms": p95 / 2,
                "p95_ms": p95, "fit_s": fit, "fit_note": note, "peak_rss_mb": rss, "cost": "free (local)",
                "error": None, "failed": 0}

    return {"examples": {"source": "x.jsonl", "sha256": "e" * 64, "n": 40, "datasets": ["a", "b"]},
            "suite": {"name": "ci", "description": "d"}, "options": {"timing": "one per call"}, "arms": [],
            "leaderboard": [row("zsnli", "zero-shot", 0.9, 120.0, 3600.0, 900.0, "trained offline (manifest)"),
                            row("embedding+logreg", "few-shot", 0.8, 30.0, 2.5, 700.0),
                            row("tfidf", "few-shot", 0.6, 2.0, 0.3, 150.0)],
            "constraints": constraints or {"max_p95_ms": None, "max_fit_s": None, "max_rss_mb": None, "best": "zsnli"},
            "receipt": {"sha256": "s" * 64, "signature": None, "key_id": None, "examples_sha256": "e" * 64}}


def _controls(page: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The ceilings' boxes (id, figure) and the toggles' arms of a rendered report."""
    boxes = re.findall(r"<input type='number' min='0' step='any' id='([\w-]+)' data-figure='(\w+)'", page)
    arms = re.findall(r"<input type='checkbox' name='arm-toggle' value='([^']*)' checked>", page)
    return boxes, arms


def test_the_cli_html_and_the_service_page_have_one_set_of_toggles_ceilings_and_script():
    """Issue 57 (9): arm toggles and ceilings existed only on the service's page, and the CLI's ceilings (p95,
    memory) were not the page's (p50, fit seconds). One renderer, one set, one script, in both."""
    from zsnli.compare.render_arms import report_script
    from zsnli.compare.service.page import result_page, static_asset

    cli = render_html(_cli_report())
    answer = service_answer({"served": (0.9, 0.1, 3.0), "majority": (0.5, 0.2, 0.1)}, 10)
    service = result_page(answer, None)
    cli_boxes, cli_arms = _controls(cli)
    service_boxes, service_arms = _controls(service)
    assert cli_boxes == service_boxes == [("max-p95", "p95_ms"), ("max-fit", "fit_s"), ("max-rss", "peak_rss_mb")]
    assert cli_arms == ["zsnli", "embedding+logreg", "tfidf"] and service_arms == ["served", "majority"]
    assert f"<script>{report_script()}</script>" in cli  # the file works on its own
    assert static_asset("report.js") == (report_script().encode(), "text/javascript; charset=utf-8")
    for page in (cli, service):
        assert "id='arm-toggles'" in page and "id='ceiling-best'" in page
        assert re.search(r"<tr class='scored' data-arm='[^']+' data-rank='1' data-ceiling-p95-ms='[^']*' "
                         r"data-ceiling-fit-s='[^']*' data-ceiling-peak-rss-mb='[^']*'>", page)
    # the service measures no arm's memory: its box is off; the CLI's is on
    assert "id='max-rss' data-figure='peak_rss_mb' disabled" in service and "data-figure='peak_rss_mb'>" in cli


@pytest.mark.parametrize("limits, best", [({"max_p95_ms": 50.0}, "embedding+logreg"),
                                          ({"max_fit_s": 1.0}, "zsnli"),  # trained offline: no fit cost here
                                          ({"max_p95_ms": 50.0, "max_fit_s": 1.0}, "tfidf"),
                                          ({"max_rss_mb": 100.0}, None)])
def test_the_cli_flags_fill_the_reports_ceilings_and_pick_by_the_one_rule(limits, best, capsys):
    """--max-p95-ms / --max-fit-s / --max-rss-mb are the page's ceilings: the report's constraints (pick_within),
    the HTML's boxes and pick, and the terminal line agree."""
    from rich.console import Console

    from zsnli.compare.bakeoff_analysis import pick_within
    from zsnli.compare.render import print_report

    report = _cli_report()
    report["constraints"] = pick_within(report["leaderboard"], **limits)
    assert report["constraints"]["best"] == best
    page = render_html(report)
    for name, box in (("max_p95_ms", "max-p95"), ("max_fit_s", "max-fit"), ("max_rss_mb", "max-rss")):
        value = re.search(rf"id='{box}' data-figure='\w+'( value='([^']*)')?", page).group(2)
        assert value == (repr(limits[name]) if name in limits else None), name
    assert re.search(r"id='ceiling-best'>(.*?)</b>", page).group(1) == (f"<bdi>{best}</bdi>" if best else "no arm fits")
    report["protocol"] = {"description": "d"}
    report["arms"] = []
    report["options"]["min_support"] = 10
    print_report(report, Console(width=200, force_terminal=False))
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("best within ")]
    assert line and line[0].endswith(f": {best or 'no arm fits'}")
