"""Run a bake-off suite: every arm on the same test rows, under the protocol; measure; analyse.

For each arm (by default in its own forked process, so that its peak RSS is
its own and a crash loses only that arm):

1. ``setup()`` (load models, start servers; not timed per document);
2. zero-shot arms: ``predict_proba`` on every test row of the plan, one
   document per call, each call timed; few-shot arms: per fold, ``fit`` on
   the fold's training rows (timed: *fit seconds*), then the same per-document
   calls on the fold's test rows only;
3. ``peak_rss_bytes()`` of the arm's server if it has one, else the ``VmHWM``
   of the process that ran the arm; ``close()``.

Warm-up calls (untimed, results discarded) go first on each arm. Then, in
this process: per-dataset metrics (`scorecards.score_examples`), escalation
(`analysis.escalation`), a coverage-vs-accuracy curve, per-class F1, top
confusions, and declared/discovered slices (`slices`).

Imports: numpy, scikit-learn, `zsnli.compare.arms`, `zsnli.metrics`, and the
harness modules `analysis`, `examples`, `protocol`, `scorecards`, `slices`, `suite`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
import time
import traceback
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from zsnli.compare.arms import build_arm
from zsnli.compare.arms.zero_shot import vmhwm_bytes
from zsnli.harness.cli import heartbeat
from zsnli.harness.examples import Example
from zsnli.compare.protocol import Plan
from zsnli.compare.suite import ArmEntry

DEFAULT_WARMUPS = 3
MiB = 1024 * 1024


@dataclass
class ArmResult:
    """What one arm produced: probabilities per test row (None = that document failed), timings, identity.

    ``seconds[i]`` is the wall time of the call that scored ``test_rows[i]``;
    ``fit_s`` sums the real fit time over folds (``fits`` calls);
    ``peak_rss`` is in bytes with ``rss_source`` saying whose it is.
    """

    name: str
    type: str
    trains: bool
    cost: str
    identity: dict[str, Any] = field(default_factory=dict)
    probabilities: dict[int, list[float] | None] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    setup_s: float = float("nan")
    fit_s: float = 0.0
    fits: int = 0
    offline_training: dict[str, Any] | None = None
    peak_rss: int | None = None
    rss_source: str = ""
    errors: list[str] = field(default_factory=list)
    error: str | None = None


def _predict_rows(arm, rows: Sequence[int], examples: Sequence[Example], out: ArmResult) -> None:
    for i in rows:
        e = examples[i]
        t0 = time.perf_counter()
        try:
            p = np.asarray(arm.predict_proba([e.text], list(e.labels)), dtype=np.float64)
            if p.shape != (1, len(e.labels)) or not np.all(np.isfinite(p)):
                raise ValueError(f"shape {p.shape} for 1 document and {len(e.labels)} labels, or non-finite")
            out.probabilities[i] = p[0].tolist()
        except Exception as exc:  # one bad document must not end the arm
            out.probabilities[i] = None
            out.errors.append(f"{e.id!r}: {type(exc).__name__}: {exc}")
        out.seconds[i] = time.perf_counter() - t0


def _warm_up(arm, rows: Sequence[int], examples: Sequence[Example], n: int) -> None:
    for i in list(rows)[:n]:
        try:
            arm.predict_proba([examples[i].text], list(examples[i].labels))
        except Exception:  # noqa: BLE001 - the timed call records the error
            pass


def run_arm(entry: ArmEntry, examples: Sequence[Example], plan: Plan, warmups: int = DEFAULT_WARMUPS) -> ArmResult:
    """Run one suite entry over the plan's test rows (see the module docstring); never raises for the arm's failures."""
    out = ArmResult(entry.name, entry.type, False, "")
    arm = None
    try:
        arm = build_arm(entry.type, entry.name, entry.params)
        out.trains, out.cost = arm.trains, str(arm.cost)
        t0 = time.perf_counter()
        arm.setup()
        out.setup_s = time.perf_counter() - t0
        if not arm.trains:
            _warm_up(arm, plan.test_rows, examples, warmups)
            _predict_rows(arm, plan.test_rows, examples, out)
        else:
            warmed = False
            for fold in plan.folds:
                t0 = time.perf_counter()
                try:
                    arm.fit([examples[i].text for i in fold.train],
                            [examples[i].labels[examples[i].label] for i in fold.train])
                except Exception as exc:  # the fold's rows are scored as failed
                    out.errors.append(f"fit {fold.dataset} fold {fold.index}: {type(exc).__name__}: {exc}")
                    out.probabilities.update({i: None for i in fold.test})
                    out.seconds.update({i: float("nan") for i in fold.test})
                    continue
                out.fit_s += time.perf_counter() - t0
                out.fits += 1
                if not warmed:
                    _warm_up(arm, fold.test, examples, warmups)
                    warmed = True
                _predict_rows(arm, fold.test, examples, out)
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


def _child(conn, entry, examples, plan, warmups) -> None:
    try:
        result = run_arm(entry, examples, plan, warmups)
        if result.peak_rss is None:
            result.peak_rss = vmhwm_bytes(os.getpid())
            result.rss_source = "the arm's own process (VmHWM, forked from the harness)"
        conn.send(result)
    except BaseException:  # noqa: BLE001 - tell the parent, whatever happened
        conn.send(ArmResult(entry.name, entry.type, False, "", error=traceback.format_exc(limit=3)))
    finally:
        conn.close()


def run_arm_isolated(entry: ArmEntry, examples: Sequence[Example], plan: Plan, warmups: int = DEFAULT_WARMUPS,
                     timeout_s: float | None = None) -> ArmResult:
    """`run_arm` in a forked child process (Linux/macOS); its peak RSS is the child's own ``VmHWM``.

    A child that dies or exceeds ``timeout_s`` gives an `ArmResult` with ``error`` set.
    """
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, entry, examples, plan, warmups), daemon=True)
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
            proc.kill()
        proc.join()
        parent.close()
    return ArmResult(entry.name, entry.type, False, "", error=f"{reason} (exit code {proc.exitcode})")


def run_arms(entries: Sequence[ArmEntry], examples: Sequence[Example], plan: Plan, isolate: bool = True,
             warmups: int = DEFAULT_WARMUPS, console=None) -> list[ArmResult]:
    """Every entry in turn (isolated in a child process unless ``isolate`` is False)."""
    results = []
    for k, entry in enumerate(entries, 1):
        if console is not None:
            console.print(f"arm {k}/{len(entries)}: {entry.name} ({entry.type}) on {len(plan.test_rows)} test rows")
        t0 = time.monotonic()
        with heartbeat(f"arm {entry.name}") if console is not None else nullcontext():  # arms run silently
            result = (run_arm_isolated if isolate else run_arm)(entry, examples, plan, warmups)
        if not isolate and result.peak_rss is None:
            result.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            result.rss_source = "the whole harness process (not isolated: includes earlier arms)"
        results.append(result)
        if console is not None:
            status = f"failed: {result.error}" if result.error else f"done in {time.monotonic() - t0:.1f} s"
            console.print(f"  {status}", markup=False)
    return results


def latency(result: ArmResult, rows: Sequence[int]) -> dict[str, float | None]:
    """p50/p95 ms per document and docs/s (documents over the summed per-document seconds)."""
    secs = np.array([result.seconds[i] for i in rows if math.isfinite(result.seconds.get(i, float("nan")))])
    if not secs.size:
        return {"p50_ms": None, "p95_ms": None, "mean_ms": None, "docs_per_s": None}
    return {"p50_ms": float(np.percentile(secs, 50) * 1000), "p95_ms": float(np.percentile(secs, 95) * 1000),
            "mean_ms": float(secs.mean() * 1000), "docs_per_s": float(secs.size / secs.sum()) if secs.sum() > 0 else None}


def fit_column(result: ArmResult) -> tuple[float | None, str]:
    """(seconds, note) of the fit column: real fit time for few-shot arms, the recorded training time if offline."""
    if result.trains:
        return result.fit_s, f"{result.fits} fit(s), measured"
    if result.offline_training:
        return float(result.offline_training["seconds"]), f"trained offline ({result.offline_training['source']})"
    return None, "none (zero-shot)"


def class_counts(examples: Sequence[Example], rows: Sequence[int]) -> dict[str, int]:
    """Test rows per dataset (for the report's protocol table)."""
    return dict(Counter(examples[i].dataset for i in rows))
