"""``python validate.py bakeoff``: a suite file's arms on one examples file, under one protocol, one report.

Flow: suite (`suite`) -> examples (`examples`) -> folds (`protocol`) ->
arms run (`bakeoff_runner`) -> per-arm analysis and leaderboard
(`bakeoff_analysis`) -> JSON report dict, sealed by `receipts` (rendered by `render`, checked
by `regression_gate`).

Imports: the harness modules named above, `zsnli.harness.cli` (`one_line`), `zsnli.manifest`, `zsnli.compare.report` (plain JSON),
`zsnli.compare.receipts`, `zsnli.compare.budget` (the plan's estimate against ``--time-budget-s``) and
`zsnli.compare.render` (the verdict's words: ``verdict`` and ``arms_run`` say a partial run where the winner is
named).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from zsnli import __version__
from zsnli.manifest import sha256_file
from zsnli.metrics import HEADLINE_METRIC
from zsnli.compare import budget
from zsnli.compare.arms import ARMS, ArmError, build_arm
from zsnli.compare.bakeoff_analysis import arm_entry, leaderboard, pick_within
from zsnli.compare.bakeoff_runner import DEFAULT_WARMUPS, class_counts, run_arms
from zsnli.harness.examples import Example, ExamplesError, load_examples
from zsnli.compare.protocol import describe, make_plan
from zsnli.compare.receipts import Signer, seal
from zsnli.compare.render import board as render_board
from zsnli.compare.render import winner_line
from zsnli.compare.report import json_ready
from zsnli.compare.slices import declared_groups, discovered_groups, read_metadata
from zsnli.compare.suite import Suite
from zsnli.harness.cli import one_line

TIMING = ("one document per call; docs/s = documents / summed call seconds, or / wall seconds for an arm with "
          "several documents in flight (its concurrency)")


@dataclass
class BakeoffOptions:
    """Command-line settings that override or complement the suite file (None: the suite's value).

    signer: signs the report's receipt (`zsnli.compare.receipts.signer_for`); None: unsigned (sha256 only).
    time_budget_s: seconds for all the arms (``--time-budget-s``): the plan's estimate is checked against it
    before any arm runs (`check_plan`) and the arms are stopped at it (`zsnli.compare.bakeoff_runner.run_arms`).
    progress: each arm's rows done while it runs, on the console (False: ``--no-progress``).
    """

    root: Path = Path(".")
    examples: str | None = None
    max_per_dataset: int | None = None
    protocol: dict[str, Any] = field(default_factory=dict)
    min_support: int | None = None
    targets: list[float] | None = None
    max_p95_ms: float | None = None
    max_fit_s: float | None = None
    max_rss_mb: float | None = None
    isolate: bool = True
    warmups: int = DEFAULT_WARMUPS
    only: list[str] | None = None
    signer: Signer | None = None
    time_budget_s: float | None = None
    progress: bool = True


def _examples_path(suite: Suite, opts: BakeoffOptions) -> str:
    spec = opts.examples or suite.examples
    if spec is None:
        raise ValueError("no examples: give --examples or 'examples = ...' in the suite file")
    return spec if spec.startswith("hub:") or Path(spec).is_absolute() or opts.examples else str(opts.root / spec)


def estimate(entries, examples, plan) -> budget.Estimate:
    """The plan's cost before any arm runs (`zsnli.compare.budget`), each arm on its own (a command-line arm
    embeds the examples itself)."""
    shape = budget.PlanShape.of(examples, plan)
    return budget.Estimate({e.name: budget.arm_seconds(e.type, e.params, shape) for e in entries})


def check_plan(entries, examples, plan, opts: BakeoffOptions, console=None) -> None:
    """Say the plan's estimate (`estimate`) and, with ``opts.time_budget_s``, refuse it when it is over: raises
    ``ValueError`` (one line: the estimate, the costliest arms, what to leave out) before any arm runs."""
    est = estimate(entries, examples, plan)
    if console is not None:
        console.print(f"estimated arm work: ~{est.total_s:.0f} s ({'; '.join(est.lines())}; zsnli.compare.budget's "
                      "model, measured on the machine docs/bakeoff.md names)", markup=False, soft_wrap=True)
    if opts.time_budget_s is not None:
        try:
            budget.check(est, opts.time_budget_s, "--time-budget-s")
        except budget.OverBudget as exc:
            raise ValueError(str(exc)) from None


def check_arm_labels(entries, examples) -> None:
    """Before any arm runs: each arm's parameters against the examples' labels (``Arm.check_labels``: e.g. keyword
    rules for a label no example has). Raises ``ValueError`` (one line naming the arm) on the first refusal."""
    labels = {label for e in examples for label in e.labels}
    for entry in entries:
        try:
            build_arm(entry.type, entry.name, entry.params).check_labels(labels)
        except ArmError as exc:
            raise ValueError(f"arm {entry.name} ({entry.type}): {one_line(exc)}") from None


def check_bakeoff_examples(examples: Sequence[Example], source: str) -> None:
    """Refuse, as ``POST /v1/bakeoff`` does (`zsnli.compare.service.protocol`, 422), examples a bake-off cannot
    score: a blank text (empty or only whitespace) and a dataset with fewer than 2 distinct gold labels
    (every arm that answers its one label would score perfectly: nothing to tell apart). Raises
    ``ExamplesError`` (one line naming ``source`` and the example id or the dataset)."""
    gold: dict[str, set[str]] = {}
    for e in examples:
        if not e.text.strip():
            raise ExamplesError(f"{source}: example id {e.id!r} (dataset {e.dataset!r}): 'text' must not be blank")
        gold.setdefault(e.dataset, set()).add(e.labels[e.label])
    for name, labels in gold.items():
        if len(labels) < 2:
            raise ExamplesError(f"{source}: dataset {name!r} needs at least 2 distinct gold labels, got "
                                f"{len(labels)} ({', '.join(map(repr, sorted(labels)))}): a bake-off on it has "
                                "nothing to tell apart")


def run_bakeoff(suite: Suite, opts: BakeoffOptions, console=None) -> dict[str, Any]:
    """Run the suite and return the report: plain JSON (`json_ready`), sealed by its ``receipt``
    (`zsnli.compare.receipts.seal`, signed by ``opts.signer`` when given).

    Raises ``ExamplesError`` (unreadable examples, or a blank text or a one-label dataset:
    `check_bakeoff_examples`), ``ProtocolError`` (a
    dataset the protocol cannot split) or ``ValueError`` (no examples given,
    an unknown ``--only`` arm, an arm's parameters naming labels the examples do not have:
    `check_arm_labels`). A failing arm does not raise: its entry
    carries ``error``.
    """
    examples_spec = _examples_path(suite, opts)
    example_set = load_examples(examples_spec, opts.max_per_dataset)
    examples = example_set.examples
    kept = f" (--max-per-dataset {opts.max_per_dataset}: its first rows)" if opts.max_per_dataset else ""
    check_bakeoff_examples(examples, example_set.source + kept)
    settings = {**suite.protocol, **{k: v for k, v in opts.protocol.items() if v is not None}}
    plan = make_plan(examples, **settings)
    min_support = opts.min_support if opts.min_support is not None else suite.analysis["min_support"]
    targets = opts.targets or suite.analysis["targets"]
    entries = suite.arms
    if settings.get("protocol") == "all" and any(ARMS[a.type].trains for a in entries if a.type in ARMS):
        raise ValueError("protocol 'all' fits nothing: it is for zero-shot arms only (a few-shot arm is in the suite)")
    if opts.only:
        unknown = sorted(set(opts.only) - {a.name for a in entries})
        if unknown:
            raise ValueError(f"--only names arm(s) not in the suite: {', '.join(unknown)}")
        entries = [a for a in entries if a.name in opts.only]
    check_arm_labels(entries, examples)
    if console is not None:
        console.print(describe(plan), markup=False)
    check_plan(entries, examples, plan, opts, console)
    results = run_arms(entries, examples, plan, opts.isolate, opts.warmups, console, opts.time_budget_s,
                       opts.progress)

    test_rows = plan.test_rows
    test = [examples[i] for i in test_rows]
    declared = declared_groups(test, read_metadata(examples_spec, test))
    discovered = discovered_groups([e.text for e in test], min_support)
    arms = [arm_entry(r, examples, test_rows, declared, discovered, targets, min_support, settings["seed"])
            for r in results]
    board = leaderboard(arms)
    report: dict[str, Any] = {
        "tool": "zsnli validate bakeoff", "version": __version__, "created_unix": time.time(),
        "metric": HEADLINE_METRIC,
        "suite": {"path": suite.path, "name": suite.name, "description": suite.description,
                  "sha256": sha256_file(suite.path) if suite.path else None},
        "examples": {"source": example_set.source, "sha256": example_set.sha256, "n": len(examples),
                     "datasets": example_set.datasets(), "notes": example_set.notes},
        "protocol": {**plan.as_dict(), "description": describe(plan),
                     "test_rows_per_dataset": class_counts(examples, test_rows)},
        "options": {"min_support": min_support, "targets": targets, "isolate": opts.isolate, "warmups": opts.warmups,
                    "max_per_dataset": opts.max_per_dataset,
                    "timing": TIMING},
        "arms": arms, "leaderboard": board,
        "constraints": pick_within(board, opts.max_p95_ms, opts.max_fit_s, opts.max_rss_mb),
    }
    not_run = {a["name"]: a["error"] for a in arms if a.get("error")}
    report["arms_run"] = {"requested": len(arms), "finished": len(arms) - len(not_run), "not_finished": not_run}
    report = json_ready(report)
    report["verdict"] = winner_line(report, render_board(report))
    report["receipt"] = seal(report, example_set.sha256, {a["name"]: a["identity"] for a in report["arms"]},
                             opts.signer, not_run)
    return report
