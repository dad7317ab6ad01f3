"""Command lines ``validate.py bakeoff`` and ``validate.py gate``, and the bake-off's printed tables.

Exit codes: bakeoff 0 every arm ran, 1 an arm failed, 2 bad usage / unreadable
suite or examples; gate 0 pass, 1 a violation, 2 unreadable report or bad flag.
``validate.py compare`` (`zsnli.compare.cli.compare_main`) prints and writes its report with
`print_report` and `zsnli.compare.bakeoff_html` too.

Imports: the harness modules `bakeoff`, `bakeoff_html`, `regression_gate`, `suite`, `protocol`.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Sequence

from zsnli.compare.protocol import PROTOCOLS
from zsnli.harness.cli import (
    UsageParser, accuracy_target, non_negative_float, non_negative_int, number_type, open_fraction, positive_float,
    positive_int,
)
from zsnli.compare.regression_gate import DEFAULT_MAX_ECE_RISE, DEFAULT_MAX_F1_DROP, DEFAULT_MAX_SLICE_DROP


def bakeoff_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="validate.py bakeoff",
                description="Run the arms of a suite file (zero-shot and few-shot) on the same test rows of an "
                            "examples file; leaderboard with quality, latency, fit time, memory and cost; escalation; "
                            "declared and discovered slices; JSON + HTML report.")
    p.add_argument("--suite", type=Path, required=True, help="suite file (TOML), e.g. suites/ci.toml")
    p.add_argument("--root", type=Path, default=Path("."), help="project root (model/, serve.sh; default .)")
    p.add_argument("--examples", default=None, help="examples JSONL (default: the suite's 'examples', under --root)")
    p.add_argument("--max-per-dataset", type=positive_int, default=None, help="first N documents of each dataset only")
    p.add_argument("--protocol", choices=PROTOCOLS, default=None, help="per dataset: auto (default), split, kfold, loo")
    p.add_argument("--train-fraction", type=open_fraction, default=None, help="training share of a split (default 0.5)")
    p.add_argument("--seed", type=non_negative_int, default=None, help="seed of the splits and folds (default 0)")
    p.add_argument("--folds", type=number_type(int, 2), default=None, help="k of k-fold, capped at the smallest class (default 5)")
    p.add_argument("--min-class-for-split", type=positive_int, default=None,
                   help="auto: one split when the smallest class has this many rows, else k-fold/LOO (default 8)")
    p.add_argument("--min-support", type=positive_int, default=None, help="smallest slice (default 10)")
    p.add_argument("--target-accuracy", type=accuracy_target, action="append", default=None,
                   help="escalation target accuracy (repeatable; default 0.9)")
    p.add_argument("--max-p95-ms", type=positive_float, default=None, help="name the best arm with p95 ms/doc at most this")
    p.add_argument("--max-rss-mb", type=positive_float, default=None, help="name the best arm with peak RSS (MiB) at most this")
    p.add_argument("--only", action="append", default=None, metavar="ARM", help="run only this arm (repeatable)")
    p.add_argument("--in-process", action="store_true",
                   help="run arms in this process (no fork; peak RSS is then the whole process's)")
    p.add_argument("--report", type=Path, default=None, help="JSON report path (default reports/bakeoff.json)")
    p.add_argument("--html", type=Path, default=None, help="HTML report path (default: next to --report)")
    return p


def gate_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="validate.py gate",
                description="Exit 1 if, for any arm of the baseline, macro-F1 dropped, ECE rose, or a declared "
                            "slice fell further behind the arm's own accuracy, by more than the thresholds.")
    p.add_argument("report", type=Path, help="bake-off JSON report to check")
    p.add_argument("--baseline", type=Path, required=True, help="bake-off JSON report to hold it to")
    p.add_argument("--max-f1-drop", type=non_negative_float, default=DEFAULT_MAX_F1_DROP, help="default 0.02")
    p.add_argument("--max-ece-rise", type=non_negative_float, default=DEFAULT_MAX_ECE_RISE, help="default 0.02")
    p.add_argument("--max-slice-drop", type=non_negative_float, default=DEFAULT_MAX_SLICE_DROP, help="default 0.05")
    return p


def _f(x, spec=".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_report(report: dict, console) -> None:
    """Leaderboard, constraint pick, escalation and the top slices per arm (rich tables)."""
    from rich.table import Table

    lb = Table(title=f"Leaderboard: {report['protocol']['description']}")
    cols = ("#", "arm", "kind", "macro-F1", "acc.", "ECE", "cal. F1", "norm.", "p50 ms", "p95 ms", "docs/s", "fit s",
            "RSS MiB", "cost")
    for c in cols:
        lb.add_column(c, justify="left" if c in ("arm", "kind", "cost") else "right")
    for k, r in enumerate(report["leaderboard"], 1):
        fit = _f(r["fit_s"], ".1f") + (" (offline)" if "offline" in r["fit_note"] else "")
        lb.add_row(str(k), r["arm"], r["kind"], _f(r["macro_f1"]), _f(r["accuracy"]), _f(r["ece"]),
                   _f(r["calibrated_macro_f1"]), _f(r["normalised"], ".1f"), _f(r["p50_ms"], ".1f"),
                   _f(r["p95_ms"], ".1f"), _f(r["docs_per_s"], ".1f"), fit, _f(r["peak_rss_mb"], ".0f"), r["cost"])
    console.print(lb)
    c = report["constraints"]
    if c["max_p95_ms"] is not None or c["max_rss_mb"] is not None:
        console.print(f"best within p95 <= {c['max_p95_ms']} ms and RSS <= {c['max_rss_mb']} MiB: "
                      f"{c['best'] or 'no arm fits'}", markup=False, soft_wrap=True)
    esc = Table(title="Escalation: lowest confidence threshold whose kept documents reach the target accuracy")
    for col in ("arm", "target", "threshold", "% kept", "% to a person", "kept acc."):
        esc.add_column(col, justify="left" if col == "arm" else "right")
    for a in report["arms"]:
        for e in a.get("escalation", []):
            esc.add_row(a["name"], _f(e["target"], ".2f"), _f(e["threshold"], ".4f") if e["reachable"] else "unreachable",
                        _f(100 * e["kept_fraction"], ".1f"), _f(100 * e["escalated_fraction"], ".1f"),
                        _f(e["kept_accuracy"]))
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
                sl.add_row(a["name"], "(none)", "", "", "", "", _f(a["scores"]["pooled_accuracy"]), "")
            else:
                sl.add_row(a["name"], f"{s['facet']}={s['name']}"[:60], s["kind"], str(s["n"]), _f(s["accuracy"]),
                           f"{s['low']:.3f}-{s['high']:.3f}", _f(a["scores"]["pooled_accuracy"]), _f(s["rank_score"], ".2f"))
    console.print(sl)
    console.print(f"receipt sha256: {report['receipt']['sha256']}", markup=False, soft_wrap=True)


def bakeoff_main(argv: Sequence[str], console) -> int:
    """``validate.py bakeoff``; returns the exit code."""
    from zsnli.compare.suite_bakeoff import BakeoffOptions, run_bakeoff
    from zsnli.compare.bakeoff_html import render_bakeoff_html
    from zsnli.compare.report import scrub_non_finite, write_report_json
    from zsnli.harness.examples import ExamplesError
    from zsnli.compare.protocol import ProtocolError
    from zsnli.compare.suite import SuiteError, load_suite

    args = bakeoff_parser().parse_args(argv)
    protocol = {"protocol": args.protocol, "train_fraction": args.train_fraction, "seed": args.seed,
                "folds": args.folds, "min_class_for_split": args.min_class_for_split}
    opts = BakeoffOptions(root=args.root, examples=args.examples, max_per_dataset=args.max_per_dataset,
                          protocol=protocol, min_support=args.min_support, targets=args.target_accuracy,
                          max_p95_ms=args.max_p95_ms, max_rss_mb=args.max_rss_mb, isolate=not args.in_process,
                          only=args.only)
    try:
        suite = load_suite(args.suite, args.root)
        report = scrub_non_finite(run_bakeoff(suite, opts, console))
    except (SuiteError, ExamplesError, ProtocolError, ValueError) as exc:
        console.print(f"error: {exc}", markup=False, soft_wrap=True)
        return 2
    print_report(report, console)
    report_path = args.report or Path("reports/bakeoff.json")
    write_report_json(report_path, report)
    html_path = args.html or report_path.with_suffix(".html")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_bakeoff_html(report), encoding="utf-8")
    console.print(f"JSON report: {report_path}\nHTML report: {html_path}", markup=False, soft_wrap=True)
    return 1 if any(a.get("error") for a in report["arms"]) else 0


def gate_main(argv: Sequence[str], console) -> int:
    """``validate.py gate``; prints every violation with both numbers; returns 0 pass / 1 fail / 2 bad input."""
    from zsnli.compare.regression_gate import GateInputError, compare_reports, load_report

    args = gate_parser().parse_args(argv)
    try:
        report, baseline = load_report(args.report), load_report(args.baseline)
    except GateInputError as exc:
        console.print(f"error: {exc}", markup=False, soft_wrap=True)
        return 2
    violations = compare_reports(report, baseline, args.max_f1_drop, args.max_ece_rise, args.max_slice_drop)
    arms = [a["name"] for a in baseline["arms"] if not a.get("error")]
    for v in violations:
        console.print(f"FAIL {v.message}", markup=False, soft_wrap=True)
    if violations:
        console.print(f"gate: {len(violations)} violation(s) against {args.baseline}", markup=False, soft_wrap=True)
        return 1
    console.print(f"gate: PASS ({len(arms)} arm(s) of {args.baseline}: {', '.join(arms)}; thresholds macro-F1 drop "
                  f"{args.max_f1_drop}, ECE rise {args.max_ece_rise}, slice drop {args.max_slice_drop})", markup=False, soft_wrap=True)
    return 0

