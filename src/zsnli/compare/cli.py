"""Command line of ``validate.py``: the self-check (default), ``compare`` (the bake-off) and
``verify-receipt`` (the receipt of a bake-off report or service answer, offline: `zsnli.compare.receipt_cli`).

Exit codes: 0 all gates pass / every arm ran; 1 a gate failed / an arm
failed; 2 bad usage, an unknown command or unreadable examples (one line on stderr, ``validate.py[ COMMAND]: error:
...``, checked before any server starts or model loads); 130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM, every
server it started stopped. ``bakeoff`` and ``gate`` are `zsnli.compare.bakeoff_cli`'s.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Sequence

from rich.markup import escape

from zsnli.harness.cli import (
    path_type,
    non_negative_seconds, positive_seconds,
    UsageParser, accuracy_target, non_negative_int, one_line_errors, positive_float, positive_int,
    output_file, url_problem, usage_error, unknown_command as _unknown_command,
)
from zsnli.harness.examples import DEFAULT_EXAMPLES, EXAMPLES_FORMAT, EXAMPLES_HINT, HUB_PREFIX, ExamplesError
from zsnli.harness.load import DEFAULT_CONCURRENCY, DEFAULT_WARMUPS
from zsnli.harness.server import DEFAULT_SERVE_CMD, serve_command, stops_servers
from zsnli.compare.receipts import add_receipt_key_flag
from zsnli.compare.report import scrub_non_finite, write_report_json
from zsnli.compare.selfcheck import DEFAULT_MAX_SECONDS, DEFAULT_STARTUP_TIMEOUT_S
from zsnli.compare.slices import DEFAULT_MIN_SUPPORT as DEFAULT_MIN_SLICE_N
from zsnli.compare.suite import DEFAULT_TARGET_ACCURACY, ArmEntry, Suite
from zsnli.training.usage import UsageError, check_file_arg, check_folder_arg

COMPARE_PROG = "validate.py compare"
COMMANDS = {"compare": "the bake-off of servers, model directories and baselines given by flags",
            "bakeoff": "the arms of a suite file (zero-shot and few-shot) on the same rows",
            "gate": "hold a bake-off report to a baseline report (exit 1 on a regression)",
            "verify-receipt": "check the receipt of a bake-off report, offline"}
"""``validate.py``'s commands (the first argument; none: the self-check) and what each does, for ``--help`` and
the refusal of an unknown one (`unknown_command`)."""

ROOT_HINT = "give the project root (it holds model/ and serve.sh)"
EXAMPLES_HELP = (f"examples file ({EXAMPLES_FORMAT}) or 'hub:btzsc' (needs network); default {DEFAULT_EXAMPLES} "
                 "under --root (shipped in the repository)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=path_type, default=Path("."),
                   help="project root holding model/, the manifests and serve.sh (default: current directory)")
    p.add_argument("--examples", default=None, help=EXAMPLES_HELP)
    p.add_argument("--concurrency", type=positive_int, default=DEFAULT_CONCURRENCY, help="documents in flight (default 32)")
    p.add_argument("--warmups", type=non_negative_int, default=DEFAULT_WARMUPS, help="untimed warm-up requests (default 16)")
    p.add_argument("--startup-timeout", type=positive_seconds, default=DEFAULT_STARTUP_TIMEOUT_S,
                   help="seconds to wait for /health 200 (default 300)")
    p.add_argument("--serve-cmd", type=serve_command, default=DEFAULT_SERVE_CMD,
                   help="command that starts a server; gets ZSNLI_HOST/ZSNLI_PORT/ZSNLI_MODEL_DIR in its "
                        "environment, {port} and {host} are substituted (default: 'bash serve.sh')")
    p.add_argument("--report", type=output_file, default=None, help="write the JSON report here")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of arg-max tie-breaks and of --docs resampling")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars or lines (the rows done of each arm included)")


def selfcheck_parser() -> argparse.ArgumentParser:
    """Parser of ``validate.py`` (the self-check)."""
    p = UsageParser(
        prog="validate.py",
        description="Self-check: gates 1-6 (prerequisites, startup, one request, throughput, valid answers, health "
                    "after), then accuracy, macro-F1, ECE, calibrated macro-F1 and normalised score per dataset. "
                    "Other commands (validate.py COMMAND --help for each): "
                    + "; ".join(f"{name}: {what}" for name, what in COMMANDS.items()) + ".")
    _common(p)
    p.add_argument("--url", default=None, help="use this running server instead of starting serve.sh")
    p.add_argument("--docs", type=positive_int, default=None,
                   help="throughput documents (default: all examples); more than the examples resamples them, each "
                        "reuse rotated by whole words")
    p.add_argument("--max-seconds", type=non_negative_seconds, default=DEFAULT_MAX_SECONDS,
                   help="time limit of the throughput gate in seconds (default 600; 0 = none)")
    return p


def compare_parser() -> argparse.ArgumentParser:
    """Parser of ``validate.py compare``."""
    p = UsageParser(
        prog=COMPARE_PROG,
        description="Bake-off: the same examples through servers, model directories and baselines; leaderboard, "
                    "escalation, worst slices, HTML + JSON report, receipt. With no arm given: "
                    "--model-dir model --baseline pipeline --baseline embedding.")
    _common(p)
    p.add_argument("--url", action="append", default=[], metavar="[NAME=]URL", help="a running server (repeatable)")
    p.add_argument("--model-dir", action="append", default=[], metavar="[NAME=]DIR",
                   help="a model directory, served in turn with --serve-cmd and ZSNLI_MODEL_DIR (repeatable)")
    p.add_argument("--baseline", action="append", default=[], choices=("pipeline", "embedding"),
                   help="built-in baseline (repeatable): 'pipeline' = transformers zero-shot pipeline on "
                        "--pipeline-model; 'embedding' = all-MiniLM-L6-v2 cosine x scale -> softmax")
    p.add_argument("--pipeline-model", type=path_type, default=None,
                   help="NLI model directory of the pipeline baseline (default: the first --model-dir, else model/)")
    p.add_argument("--pipeline-batch-size", type=positive_int, default=1, help="the pipeline's batch_size (default 1)")
    p.add_argument("--embedding-scale", type=positive_float, default=20.0, help="cosine multiplier before softmax (default 20)")
    p.add_argument("--max-per-dataset", type=positive_int, default=None, help="first N documents of each dataset only")
    p.add_argument("--target-accuracy", type=accuracy_target, action="append", default=None,
                   help=f"escalation target accuracy (repeatable; default {DEFAULT_TARGET_ACCURACY})")
    p.add_argument("--min-slice-n", type=positive_int, default=DEFAULT_MIN_SLICE_N,
                   help=f"smallest slice reported among the worst slices (default {DEFAULT_MIN_SLICE_N})")
    p.add_argument("--html", type=output_file, default=None,
                   help="write the HTML report here (default: next to --report, else reports/compare.html)")
    add_receipt_key_flag(p)
    return p


def _examples_path(args) -> str:
    if args.examples:
        return args.examples
    return str(args.root / DEFAULT_EXAMPLES)


def _check_common(parser: argparse.ArgumentParser, args) -> None:
    """Usage checks shared by both commands (one line, exit 2, before anything slow): a file is called a file,
    a directory a directory, a missing path missing (`zsnli.training.usage`'s path checks)."""
    examples = _examples_path(args)
    try:
        check_folder_arg(args.root, "--root", ROOT_HINT)
        if not examples.startswith(HUB_PREFIX):
            check_file_arg(examples, "--examples", EXAMPLES_HINT)
    except UsageError as exc:
        parser.error(str(exc))


def _check_url(parser: argparse.ArgumentParser, flag: str, url: str) -> None:
    problem = url_problem(url)
    if problem:
        parser.error(f"{flag}: {problem}")


def _check_compare(parser: argparse.ArgumentParser, args) -> None:
    """Every bake-off argument, before any arm runs: URLs, model directories, the pipeline model, targets, names."""
    for u in args.url:
        _check_url(parser, "--url", _named(u, "url")[1])
    try:
        for d in args.model_dir:
            check_folder_arg(_named(d, "model_dir")[1], "--model-dir", "give a model directory written by train.py")
        if "pipeline" in args.baseline:
            check_folder_arg(args.pipeline_model, "--pipeline-model", "give the pipeline baseline's NLI model directory")
    except UsageError as exc:
        parser.error(str(exc))
    names = [_named(u, "url")[0] for u in args.url] + [_named(d, "model_dir")[0] for d in args.model_dir]
    names += list(dict.fromkeys(args.baseline))
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        parser.error(f"two arms are named {', '.join(dup)}; name them with NAME=TARGET")


def selfcheck_main(argv: Sequence[str], console, progress: bool) -> int:
    from zsnli.compare.scorecards import scores_table
    from zsnli.compare.selfcheck import SelfCheckOptions, run_selfcheck

    parser = selfcheck_parser()
    args = parser.parse_args(argv)
    _check_common(parser, args)
    if args.url is not None:
        _check_url(parser, "--url", args.url)
    opts = SelfCheckOptions(
        root=args.root, url=args.url, examples=_examples_path(args), docs=args.docs, concurrency=args.concurrency,
        warmups=args.warmups, max_seconds=args.max_seconds or None, startup_timeout=args.startup_timeout,
        serve_cmd=args.serve_cmd, seed=args.seed, progress=progress and not args.no_progress,
        waits_said=not args.no_progress)
    try:
        result = run_selfcheck(opts, console)
    except ExamplesError as exc:
        return usage_error("validate.py", str(exc))
    if result.scores is not None:
        console.print(scores_table(result.scores, title=f"Metrics per dataset ({escape(opts.examples)})"))
        for note in result.scores.notes:
            console.print(f"note: {escape(note)}", highlight=False)
        h = result.scores.headline
        console.print(f"headline: mean normalised score {'n/a' if math.isnan(h) else f'{h:.1f}'} / 100 "
                      f"(normalised calibrated macro-F1; 0 = uniform, 100 = gold)", highlight=False)
    passed = sum(1 for g in result.gates if g.passed)
    verdict = "[green]ALL GATES PASS[/green]" if result.passed else f"[red]{len(result.gates) - passed} GATE(S) FAILED[/red]"
    console.print(f"{verdict} ({passed}/{len(result.gates)})")
    if args.report:
        write_report_json(args.report, scrub_non_finite(result.report))
        console.print(f"report: {escape(str(args.report))}", highlight=False)
    return 0 if result.passed else 1


def compare_suite(args) -> Suite:
    """``validate.py compare``'s flags as a suite: one ``served`` arm per ``--url`` / ``--model-dir`` (at
    ``--concurrency``), ``pipeline`` and ``embedding_similarity`` for the baselines; protocol ``all``
    (every document scored, nothing fitted); ``--min-slice-n`` and ``--target-accuracy`` as the analysis."""
    served = {"concurrency": args.concurrency, "startup_timeout": args.startup_timeout,
              "progress": not args.no_progress}
    arms = []
    for u in args.url:
        name, target = _named(u, "url")
        arms.append(ArmEntry(name, "served", {"url": target, **served}))
    for d in args.model_dir:
        name, target = _named(d, "model_dir")
        arms.append(ArmEntry(name, "served", {"model_dir": str(Path(target).resolve()), "root": str(args.root),
                                              "serve_cmd": args.serve_cmd, **served}))
    for b in dict.fromkeys(args.baseline):
        if b == "pipeline":
            arms.append(ArmEntry("pipeline", "pipeline", {"model_dir": str(Path(args.pipeline_model).resolve()),
                                                           "batch_size": args.pipeline_batch_size}))
        else:
            arms.append(ArmEntry("embedding", "embedding_similarity", {"scale": args.embedding_scale}))
    return Suite(None, "compare", "validate.py compare: the arms given by its flags", None, arms,
                 {"protocol": "all", "seed": args.seed},
                 {"min_support": args.min_slice_n, "targets": args.target_accuracy})


def _named(value: str, kind: str) -> tuple[str, str]:
    """``NAME=TARGET`` or ``TARGET`` -> (name, target); the name defaults to the URL's host:port or the
    directory's last part."""
    name, sep, target = value.partition("=")
    if not sep or "://" in name:
        name, target = "", value
    if not name:
        name = target.rstrip("/").split("://")[-1] if kind == "url" else (Path(target).name or target)
    return name, target


def compare_main(argv: Sequence[str], console, progress: bool) -> int:
    """``validate.py compare``: its flags as a suite (`compare_suite`), run and reported as ``validate.py bakeoff``."""
    from zsnli.compare.receipts import ReceiptError, signer_for
    from zsnli.compare.render import print_report, render_html
    from zsnli.compare.suite_bakeoff import BakeoffOptions, run_bakeoff

    parser = compare_parser()
    args = parser.parse_args(argv)
    _check_common(parser, args)
    if not (args.url or args.model_dir or args.baseline):
        args.model_dir, args.baseline = [f"model={args.root / 'model'}"], ["pipeline", "embedding"]
    if args.pipeline_model is None:
        first_dir = _named(args.model_dir[0], "model_dir")[1] if args.model_dir else None
        args.pipeline_model = Path(first_dir) if first_dir else args.root / "model"
    args.target_accuracy = args.target_accuracy or [DEFAULT_TARGET_ACCURACY]
    rows_progress = not args.no_progress  # the arms' row counts: lines off a terminal too, unless --no-progress
    args.no_progress = args.no_progress or not progress
    _check_compare(parser, args)
    try:
        signer = signer_for(args.receipt_key)
    except ReceiptError as exc:
        return usage_error(COMPARE_PROG, str(exc))
    opts = BakeoffOptions(root=args.root, examples=_examples_path(args), max_per_dataset=args.max_per_dataset,
                          isolate=False, warmups=args.warmups, signer=signer, progress=rows_progress)
    try:
        report = run_bakeoff(compare_suite(args), opts, console)
    except (ExamplesError, ValueError) as exc:
        return usage_error(COMPARE_PROG, str(exc))
    if all(a.get("error") for a in report["arms"]):  # each failure was printed as its arm ended
        console.print("[red]no arm ran[/red]: nothing to report (no tables, HTML or JSON written)", highlight=False)
        return 1
    print_report(report, console)
    html_path = args.html or (args.report.with_suffix(".html") if args.report else Path("reports/compare.html"))
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_html(report), encoding="utf-8")
    console.print(f"HTML report: {escape(str(html_path))}", highlight=False)
    if args.report:
        write_report_json(args.report, report)
        console.print(f"JSON report: {escape(str(args.report))}", highlight=False)
    return 1 if any(a.get("error") for a in report["arms"]) else 0


def unknown_command(word: str) -> int:
    """Refuse ``validate.py WORD ...`` where ``WORD`` is no command (`COMMANDS`; the self-check takes no positional
    argument, so a first word that is not an option is always meant as one): `zsnli.harness.cli.unknown_command`;
    returns 2."""
    return _unknown_command("validate.py", word, COMMANDS, "none: the self-check; validate.py --help")


LOG_WIDTH = 1000
"""Console width when stdout is not a terminal: wider than any table the reports print, so a table in a
log or a pipe keeps every column whole (rich sizes a table to its content, never to this width)."""


def output_console(stream):
    """The rich console of ``validate.py`` on ``stream``: on a terminal its own width and colours; else
    (a log, a pipe, CI) no colour codes and `LOG_WIDTH` columns, so no table is cut or its cells folded,
    and ``soft_wrap`` keeps each message on its one line."""
    from rich.console import Console

    tty = stream.isatty()
    return Console(file=stream, highlight=False, width=None if tty else LOG_WIDTH, force_terminal=tty,
                   no_color=not tty, soft_wrap=True)


@one_line_errors("validate.py")
@stops_servers("validate.py")
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``validate.py``; returns the exit code.

    Colour, and progress bars, only on a terminal: piped or logged output
    carries no ANSI escape codes. SIGINT or SIGTERM stops every server it started, says so in one line
    and exits 130 or 143 (`zsnli.harness.server.stops_servers`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # the harness runs offline by design: never reach a hub implicitly (hub:btzsc opts in explicitly)
    if not any(a == "hub:btzsc" or a.endswith("=hub:btzsc") for a in argv):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return unknown_command(argv[0])
    console = output_console(sys.stdout)
    progress = sys.stderr.isatty()
    if argv and argv[0] == "verify-receipt":
        from zsnli.compare.receipt_cli import main as verify_receipt_main

        return verify_receipt_main(argv[1:])
    if argv and argv[0] == "compare":
        return compare_main(argv[1:], console, progress)
    if argv and argv[0] in ("bakeoff", "gate"):
        from zsnli.compare import bakeoff_cli

        return (bakeoff_cli.bakeoff_main if argv[0] == "bakeoff" else bakeoff_cli.gate_main)(argv[1:], console)
    return selfcheck_main(argv, console, progress)
