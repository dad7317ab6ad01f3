"""Command lines ``validate.py bakeoff`` and ``validate.py gate``.

Exit codes: bakeoff 0 every arm ran, 1 an arm failed (or did not finish within ``--time-budget-s``), 2 bad
usage / unreadable suite, examples or receipt key, or a plan estimated over ``--time-budget-s``; gate 0 pass, 1 a
violation, 2 unreadable report or bad flag. Each exit 2 is one line on stderr, ``validate.py bakeoff: error: ...``
or ``validate.py gate: error: ...`` (`zsnli.harness.cli.usage_error`); stdout holds the results only.
``validate.py compare`` (`zsnli.compare.cli.compare_main`) prints and writes its report the same way
(`zsnli.compare.render`, `zsnli.compare.receipts`).

Imports: `suite_bakeoff`, `render`, `receipts`, `regression_gate`, `suite`, `protocol`, `zsnli.training.usage`
(the path checks).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from zsnli.compare.protocol import PROTOCOLS
from zsnli.compare.receipts import add_receipt_key_flag
from zsnli.harness.cli import (
    path_type,
    non_negative_seconds, positive_ms, positive_seconds,
    UsageParser, accuracy_target, non_negative_float, non_negative_int, number_type, open_fraction, positive_float,
    output_file, output_file_problem, positive_int, usage_error,
)
from zsnli.harness.examples import EXAMPLES_FORMAT
from zsnli.compare.regression_gate import DEFAULT_MAX_ECE_RISE, DEFAULT_MAX_F1_DROP, DEFAULT_MAX_SLICE_DROP


BAKEOFF_PROG, GATE_PROG = "validate.py bakeoff", "validate.py gate"
"""The names the two commands' errors start with (``validate.py bakeoff: error: ...``, on stderr)."""


def bakeoff_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog=BAKEOFF_PROG,
                description="Run the arms of a suite file (zero-shot and few-shot) on the same test rows of an "
                            "examples file; leaderboard with quality, latency, fit time, memory and cost; escalation; "
                            "declared and discovered slices; JSON + HTML report.")
    p.add_argument("--suite", type=path_type, required=True, help="suite file (TOML), e.g. suites/ci.toml")
    p.add_argument("--root", type=path_type, default=Path("."), help="project root (model/, serve.sh; default .)")
    p.add_argument("--examples", default=None,
                   help=f"examples file ({EXAMPLES_FORMAT}; docs/bakeoff.md) or 'hub:btzsc'; default: the suite's "
                        "'examples', under --root")
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
    p.add_argument("--max-p95-ms", type=positive_ms, default=None,
                   help="p95 latency ceiling: name the best arm with p95 ms/doc at most this (the report's ceilings)")
    p.add_argument("--max-fit-s", type=non_negative_seconds, default=None,
                   help="cost ceiling: the best arm with at most this many fit seconds on these examples (0: nothing "
                        "fitted here: zero-shot or trained offline)")
    p.add_argument("--max-rss-mb", type=positive_float, default=None,
                   help="memory ceiling: the best arm with peak RSS (MiB) at most this")
    p.add_argument("--only", action="append", default=None, metavar="ARM", help="run only this arm (repeatable)")
    p.add_argument("--time-budget-s", type=positive_seconds, default=None,
                   help="seconds for all the arms: a plan estimated over it is refused before any arm runs (exit 2), "
                        "an isolated arm still running at it is stopped and the arms after it are not started")
    p.add_argument("--in-process", action="store_true",
                   help="run arms in this process (no fork; peak RSS is then the whole process's)")
    p.add_argument("--report", type=output_file, default=None, help="JSON report path (default reports/bakeoff.json)")
    p.add_argument("--html", type=output_file, default=None, help="HTML report path (default: next to --report)")
    add_receipt_key_flag(p)
    return p


def gate_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog=GATE_PROG,
                description="Exit 1 if, for any arm of the baseline, macro-F1 dropped, ECE rose, or a declared "
                            "slice fell further behind the arm's own accuracy, by more than the thresholds.")
    p.add_argument("report", type=path_type, help="bake-off JSON report to check")
    p.add_argument("--baseline", type=path_type, required=True, help="bake-off JSON report to hold it to")
    p.add_argument("--max-f1-drop", type=non_negative_float, default=DEFAULT_MAX_F1_DROP, help="default 0.02")
    p.add_argument("--max-ece-rise", type=non_negative_float, default=DEFAULT_MAX_ECE_RISE, help="default 0.02")
    p.add_argument("--max-slice-drop", type=non_negative_float, default=DEFAULT_MAX_SLICE_DROP, help="default 0.05")
    return p


def check_writable(path: Path, flag: str) -> None:
    """Raise ``ValueError`` (one line naming ``flag``) unless a file can be written at ``path``
    (`zsnli.harness.cli.output_file_problem`: not a directory, its folder creatable and writable)."""
    problem = output_file_problem(path)
    if problem:
        raise ValueError(f"{flag} {problem}")


def path_problem(args) -> str | None:
    """The one-line refusal of ``validate.py bakeoff``'s first path flag that names no usable path, or None:
    ``--suite`` and ``--examples`` (unless ``hub:``) must be files, ``--root`` a directory, ``--receipt-key`` not
    a directory (a path not there yet gets a new key). A file is called a file, a directory a directory, a
    missing path missing (`zsnli.training.usage`'s checks, the words of every zsnli command line)."""
    from zsnli.harness.examples import EXAMPLES_HINT, HUB_PREFIX
    from zsnli.training.usage import UsageError, check_file_arg, check_folder_arg

    try:
        check_file_arg(args.suite, "--suite", "give a suite file (TOML), e.g. suites/ci.toml")
        check_folder_arg(args.root, "--root", "give the project root (it holds model/ and serve.sh)")
        if args.examples is not None and not args.examples.startswith(HUB_PREFIX):
            check_file_arg(args.examples, "--examples", EXAMPLES_HINT)
    except UsageError as exc:
        return str(exc)
    if args.receipt_key is not None and args.receipt_key.is_dir():
        return (f"--receipt-key {args.receipt_key}: a directory, not a file; give a key file (PEM), or a path not "
                "there yet to create one")
    return None


def bakeoff_main(argv: Sequence[str], console) -> int:
    """``validate.py bakeoff``; returns the exit code."""
    from zsnli.compare.receipts import ReceiptError, signer_for
    from zsnli.compare.render import print_report, render_html
    from zsnli.compare.report import write_report_json
    from zsnli.compare.suite_bakeoff import BakeoffOptions, run_bakeoff
    from zsnli.harness.examples import ExamplesError
    from zsnli.compare.protocol import ProtocolError
    from zsnli.compare.suite import SuiteError, load_suite

    args = bakeoff_parser().parse_args(argv)
    problem = path_problem(args)
    if problem:
        return usage_error(BAKEOFF_PROG, problem)
    protocol = {"protocol": args.protocol, "train_fraction": args.train_fraction, "seed": args.seed,
                "folds": args.folds, "min_class_for_split": args.min_class_for_split}
    try:
        signer = signer_for(args.receipt_key)
    except ReceiptError as exc:
        return usage_error(BAKEOFF_PROG, str(exc))
    opts = BakeoffOptions(root=args.root, examples=args.examples, max_per_dataset=args.max_per_dataset,
                          protocol=protocol, min_support=args.min_support, targets=args.target_accuracy,
                          max_p95_ms=args.max_p95_ms, max_fit_s=args.max_fit_s, max_rss_mb=args.max_rss_mb,
                          isolate=not args.in_process, only=args.only, signer=signer, time_budget_s=args.time_budget_s)
    report_path = args.report or Path("reports/bakeoff.json")
    html_path = args.html or report_path.with_suffix(".html")
    try:  # before the arms run: a report that cannot be written would lose their results
        for path, flag in ((report_path, "--report"), (html_path, "--html")):
            check_writable(path, flag)
        suite = load_suite(args.suite, args.root)
        report = run_bakeoff(suite, opts, console)
    except (SuiteError, ExamplesError, ProtocolError, ValueError) as exc:
        return usage_error(BAKEOFF_PROG, str(exc))
    print_report(report, console)
    write_report_json(report_path, report)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_html(report), encoding="utf-8")
    console.print(f"JSON report: {report_path}\nHTML report: {html_path}", markup=False, soft_wrap=True)
    return 1 if any(a.get("error") for a in report["arms"]) else 0


def gate_main(argv: Sequence[str], console) -> int:
    """``validate.py gate``; prints every violation with both numbers; returns 0 pass / 1 fail / 2 bad input."""
    from zsnli.compare.regression_gate import NOT_COMPARABLE, GateInputError, compare_reports, load_report

    from zsnli.training.usage import UsageError, check_file_arg

    args = gate_parser().parse_args(argv)
    try:
        for path, flag in ((args.report, "REPORT"), (args.baseline, "--baseline")):
            check_file_arg(path, flag, "give a bake-off JSON report (validate.py bakeoff --report)")
    except UsageError as exc:
        return usage_error(GATE_PROG, str(exc))
    try:
        report, baseline = load_report(args.report), load_report(args.baseline)
    except GateInputError as exc:
        return usage_error(GATE_PROG, str(exc))
    violations = compare_reports(report, baseline, args.max_f1_drop, args.max_ece_rise, args.max_slice_drop)
    arms = [a["name"] for a in baseline["arms"] if not a.get("error")]
    for v in violations:
        console.print(f"FAIL {v.message}", markup=False, soft_wrap=True)
    if violations and violations[0].what in NOT_COMPARABLE:
        return 1  # the reason is the whole answer: no count of checks that were never made
    if violations:
        console.print(f"gate: {len(violations)} violation(s) against {args.baseline}", markup=False, soft_wrap=True)
        return 1
    console.print(f"gate: PASS ({len(arms)} arm(s) of {args.baseline}: {', '.join(arms)}; thresholds macro-F1 drop "
                  f"{args.max_f1_drop}, ECE rise {args.max_ece_rise}, slice drop {args.max_slice_drop})", markup=False, soft_wrap=True)
    return 0

