"""Run a bake-off suite: every arm on the same test rows, under the protocol; measure; analyse.

For each arm (by default in its own forked process, so that its peak RSS is
its own and a crash loses only that arm):

1. ``setup()`` (load models, start servers; not timed per document);
2. the engine's arm runner (`zsnli.compare.engine.run_plan`): zero-shot arms
   score every test row, few-shot arms are fitted per fold and score its test
   rows only;
3. ``peak_rss_bytes()`` of the arm's server if it has one, else the ``VmHWM``
   of the process that ran the arm; ``close()``.

Warm-up calls (untimed, results discarded) go first on each arm. Then, in
this process: per-dataset metrics (`scorecards.score_examples`), escalation
(`analysis.escalation`), a coverage-vs-accuracy curve, per-class F1, top
confusions, and declared/discovered slices (`slices`).

Progress: while an arm runs, `zsnli.runtime.progress.watch` reports its test rows done of the total, the
rate and the time left (a line at least every 10 s off a terminal); the forked child counts its rows in a
`zsnli.runtime.progress.shared_counter`.

Imports: `zsnli.compare.arms`, `zsnli.compare.engine`, `zsnli.harness`, `protocol`, `suite`,
`zsnli.runtime.progress`.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
import traceback
from collections import Counter
from contextlib import nullcontext
from typing import Sequence

from zsnli.compare.arms import ARMS, build_arm
from zsnli.compare.arms.zero_shot import vmhwm_bytes
from zsnli.compare.engine import ArmResult, run_plan
from zsnli.harness.examples import Example
from zsnli.harness.server import raise_on_signals
from zsnli.compare.protocol import Plan
from zsnli.compare.suite import ArmEntry
from zsnli.runtime.progress import shared_counter, watch

DEFAULT_WARMUPS = 3
#: seconds an arm's child gets after SIGTERM to stop its server (`zsnli.harness.server.ServerProcess`'s grace is 10)
CHILD_STOP_GRACE_S = 15.0
MiB = 1024 * 1024


def run_arm(entry: ArmEntry, examples: Sequence[Example], plan: Plan, warmups: int = DEFAULT_WARMUPS,
            counter=None) -> ArmResult:
    """Run one suite entry over the plan's test rows (see the module docstring); never raises for the arm's
    failures. ``counter`` (a `zsnli.runtime.progress.shared_counter`): advanced by each test row done."""
    out = blank_result(entry)
    arm = None
    try:
        arm = build_arm(entry.type, entry.name, entry.params)
        out.trains, out.cost = arm.trains, str(arm.cost)
        t0 = time.perf_counter()
        arm.setup()
        out.setup_s = time.perf_counter() - t0
        run_plan(arm, examples, plan, out, warmups=warmups, on_rows=_counting(counter))
        out.offline_training = arm.offline_training()
        out.identity = arm.identity()
        server_peak = arm.peak_rss_bytes()
        if server_peak is not None:
            out.peak_rss, out.rss_source = server_peak, "server process (VmHWM)"
        if out.probabilities and all(p is None for p in out.probabilities.values()):
            out.error = "every document failed: " + (out.errors[0] if out.errors else "")
    except Exception as exc:  # report and move on to the next arm
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        if arm is not None:
            try:
                arm.close()
            except Exception as exc:  # noqa: BLE001
                out.errors.append(f"close: {type(exc).__name__}: {exc}")
    return out


def blank_result(entry: ArmEntry, error: str | None = None) -> ArmResult:
    """An `ArmResult` of ``entry`` before (or without) its run: few-shot or zero-shot and the cost as its registered
    class declares them (``trains``, ``cost``), so an arm that fails, even before it is built, keeps its kind."""
    cls = ARMS.get(entry.type)
    trains = bool(getattr(cls, "trains", False))
    cost = getattr(cls, "cost", "")
    return ArmResult(entry.name, entry.type, trains, cost if isinstance(cost, str) else "", error=error)


def _counting(counter):
    if counter is None:
        return None

    def add(n: int) -> None:
        with counter.get_lock():
            counter.value += n

    return add


def _child(conn, entry, examples, plan, warmups, counter=None) -> None:
    try:
        with raise_on_signals():  # SIGTERM from the parent unwinds run_arm, whose close() stops the arm's server
            result = run_arm(entry, examples, plan, warmups, counter)
        if result.peak_rss is None:
            result.peak_rss = vmhwm_bytes(os.getpid())
            result.rss_source = "the arm's own process (VmHWM, forked from the harness)"
        conn.send(result)
    except BaseException:  # noqa: BLE001 - tell the parent, whatever happened
        conn.send(blank_result(entry, traceback.format_exc(limit=3)))
    finally:
        conn.close()


def run_arm_isolated(entry: ArmEntry, examples: Sequence[Example], plan: Plan, warmups: int = DEFAULT_WARMUPS,
                     timeout_s: float | None = None, counter=None) -> ArmResult:
    """`run_arm` in a forked child process (Linux/macOS); its peak RSS is the child's own ``VmHWM``.

    A child that dies or exceeds ``timeout_s`` gives an `ArmResult` with ``error`` set. A child still running
    when this returns or is interrupted (the time budget, SIGINT/SIGTERM of the harness) gets SIGTERM first and
    `CHILD_STOP_GRACE_S` to stop the server its arm started (`zsnli.harness.server.raise_on_signals` in the
    child), then SIGKILL: killed at once, it used to leave that server running.
    """
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, entry, examples, plan, warmups, counter), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(timeout_s):
            return parent.recv()
        reason = f"no result within {timeout_s} s"
    except EOFError:
        reason = "the arm's process died without a result"
    finally:
        if proc.is_alive() and not parent.closed:
            proc.join(1.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(CHILD_STOP_GRACE_S)
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    return blank_result(entry, f"{reason} (exit code {proc.exitcode})")


def run_arms(entries: Sequence[ArmEntry], examples: Sequence[Example], plan: Plan, isolate: bool = True,
             warmups: int = DEFAULT_WARMUPS, console=None, budget_s: float | None = None,
             progress: bool = True) -> list[ArmResult]:
    """Every entry in turn (isolated in a child process unless ``isolate`` is False).

    console: where each arm's start and end are said (None: the arms run silently); progress: with a console, also
    the rows done while an arm runs (`zsnli.runtime.progress.watch`; False: ``--no-progress``).

    budget_s: seconds for all the arms (``--time-budget-s``) from this call: an isolated arm gets what is left
    and is stopped at the deadline (``time budget of N s exceeded``); an arm in-process cannot be stopped and
    is only checked between arms; an arm whose turn comes after the deadline is not started (``not started:
    ...``). None: no budget."""
    results = []
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for k, entry in enumerate(entries, 1):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            results.append(blank_result(entry, f"not started: the time budget of {budget_s:g} s (--time-budget-s) "
                                               "was spent by the arms before it"))
            if console is not None:
                console.print(f"arm {k}/{len(entries)}: {entry.name}: {results[-1].error}", markup=False)
            continue
        if console is not None:
            console.print(f"arm {k}/{len(entries)}: {entry.name} ({entry.type}) on {len(plan.test_rows)} test rows")
        t0 = time.monotonic()
        counter = shared_counter()
        with watch(lambda: counter.value, len(plan.test_rows), f"arm {entry.name}", "rows") \
                if console is not None and progress else nullcontext():  # without a console, arms run silently
            result = (run_arm_isolated(entry, examples, plan, warmups, timeout_s=left, counter=counter) if isolate
                      else run_arm(entry, examples, plan, warmups, counter=counter))
        if left is not None and result.error and result.error.startswith("no result within"):
            result.error = f"time budget of {budget_s:g} s exceeded (--time-budget-s): stopped after {left:.0f} s"
        if not isolate and result.peak_rss is None:
            result.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            result.rss_source = "the whole harness process (not isolated: includes earlier arms)"
        results.append(result)
        if console is not None:
            status = f"failed: {result.error}" if result.error else f"done in {time.monotonic() - t0:.1f} s"
            console.print(f"  {status}", markup=False)
    return results


def fit_column(result: ArmResult) -> tuple[float | None, str]:
    """(seconds, note) of the fit column: real fit time for few-shot arms (a fit replayed from an arm's cache
    counts the seconds it took when trained, and the note says how many were replayed), the recorded
    training time if offline."""
    if result.trains and result.fits_replayed:
        return result.fit_s, (f"{result.fits} fit(s), measured; {result.fits_replayed} replayed from the fit cache "
                              f"(counted at the seconds they took when trained; loading them took "
                              f"{result.replay_s:.1f} s)")
    if result.trains:
        return result.fit_s, f"{result.fits} fit(s), measured"
    if result.offline_training:
        return float(result.offline_training["seconds"]), f"trained offline ({result.offline_training['source']})"
    return None, "none (zero-shot)"


def class_counts(examples: Sequence[Example], rows: Sequence[int]) -> dict[str, int]:
    """Test rows per dataset (for the report's protocol table)."""
    return dict(Counter(examples[i].dataset for i in rows))
