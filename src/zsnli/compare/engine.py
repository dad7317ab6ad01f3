"""The comparison engine shared by every bake-off front end: one arm runner and one ranking rule.

``validate.py bakeoff`` and ``validate.py compare`` (`bakeoff_runner`, forked per arm) and ``POST
/v1/bakeoff`` (`zsnli.compare.service.runner`, in a worker thread under a time budget) all score an
arm with `run_plan` over a `protocol.Plan` (`protocol.make_plan`, the one fold rule) and order their
leaderboards with `rank_key` (`RANKING_RULE`). Per-dataset figures come from
`zsnli.metrics.score_rows` (through `scorecards.score_examples`), so the same examples give the
same numbers whichever front end ran them.

Imports numpy, `zsnli.harness.examples`, `zsnli.compare.protocol` only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from zsnli.harness.examples import Example
from zsnli.compare.protocol import Plan

def ranking_rule(datasets: int = 2) -> str:
    """The one ranking rule of every leaderboard, in words (see DESIGN.md, section Comparison, for why
    macro-F1), for a bake-off over ``datasets`` datasets: with one (a service bake-off on a user's
    examples) its figures are not means over datasets, and the words do not say they are."""
    over = ", mean over datasets" if datasets > 1 else ""
    return (f"macro-F1 (higher first{over}), then ECE (lower first{over}), then p50 latency per document (lower "
            "first), then the arm's name; figures compared at 4 decimals; failed arms last")


RANKING_RULE = ranking_rule()
"""`ranking_rule` of a bake-off over several datasets (a suite)."""

RANK_DECIMALS = 4


def rank_key(name: str, macro_f1: float | None, ece: float | None, p50_ms: float | None,
             failed: bool = False) -> tuple:
    """Sort key of one leaderboard row under `RANKING_RULE` (smaller sorts first).

    ``macro_f1`` and ``ece`` are the arm's means over datasets (one dataset: its own figures), in [0, 1];
    ``p50_ms`` its median milliseconds per document. A failed arm, or one without a macro-F1, sorts after
    every scored arm. Figures are rounded to `RANK_DECIMALS` first, so arms that read the same tie on them.
    """
    if failed or macro_f1 is None or (isinstance(macro_f1, float) and math.isnan(macro_f1)):
        return (1, 0.0, 0.0, 0.0, name)

    def num(x: float | None, missing: float) -> float:
        return missing if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), RANK_DECIMALS)

    return (0, -num(macro_f1, 0.0), num(ece, math.inf), num(p50_ms, math.inf), name)


CEILINGS = (("max_p95_ms", "p95_ms", "p95 latency ceiling (ms per example)"),
            ("max_fit_s", "fit_s", "cost ceiling (fit seconds on these examples)"),
            ("max_rss_mb", "peak_rss_mb", "memory ceiling (peak RSS MiB)"))
"""The one set of ceilings of every bake-off report, command line and service: ``(limit name, the row's figure,
label)``. ``validate.py bakeoff --max-p95-ms / --max-fit-s / --max-rss-mb`` set them, and the report's form
(`zsnli.compare.render_arms.ceilings`, the same in the CLI's HTML and the service's page) takes them as you type."""


def ceiling_figure(row: dict[str, Any], figure: str) -> float | None:
    """The figure of a leaderboard row that a ceiling bounds: the row's own, except the cost: fit seconds spent on
    these examples, so 0 for an arm that fits nothing here (zero-shot, ``fit_s`` None, or trained offline: its
    ``fit_note`` says so). None: not measured (a set ceiling on it is not met)."""
    if figure == "fit_s":
        if row.get("kind") == "zero-shot" or row.get("fit_s") is None or "offline" in str(row.get("fit_note") or ""):
            return 0.0
    value = row.get(figure)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def within_ceilings(rows: Sequence[dict[str, Any]], **limits: float | None) -> list[str]:
    """The arms of ``rows`` (best first) that were scored and whose figures fit every ceiling in ``limits``
    (`CEILINGS`' limit names; None: no ceiling), in their order: the one rule of every report (``bakeoff.js``'s
    ``report.js`` applies it in the page). Raises ``TypeError`` on an unknown limit name."""
    known = {name: figure for name, figure, _ in CEILINGS}
    unknown = sorted(set(limits) - set(known))
    if unknown:
        raise TypeError(f"unknown ceiling(s) {', '.join(unknown)}; known: {', '.join(known)}")
    out = []
    for r in rows:
        scored = r.get("status", "failed" if r.get("error") else "scored") == "scored" and r.get("macro_f1") is not None
        if scored and all(limit is None or ((v := ceiling_figure(r, known[name])) is not None and v <= limit)
                          for name, limit in limits.items()):
            out.append(r["arm"])
    return out


def best_within(rows: Sequence[dict[str, Any]], **limits: float | None) -> str | None:
    """The best-ranked arm inside every ceiling (`within_ceilings`), or None when no arm fits."""
    inside = within_ceilings(rows, **limits)
    return inside[0] if inside else None


@dataclass
class ArmResult:
    """What one arm produced: probabilities per test row (None = that document failed), timings, identity.

    ``seconds[i]`` is the wall time of the call that scored row ``i`` (plus `run_plan`'s ``extra_seconds``);
    ``fit_s`` sums the real fit time over folds (``fits`` calls), a fit replayed from an arm's cache counting
    the seconds it took when trained (``fits_replayed`` of them; ``replay_s``: the wall time of the replays); ``peak_rss`` is in bytes with
    ``rss_source`` saying whose it is. ``concurrency`` documents were in flight at once; when more than
    one, ``wall_s`` is the wall time of all test rows (docs/s is then documents over it).
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
    fits_replayed: int = 0
    replay_s: float = 0.0
    offline_training: dict[str, Any] | None = None
    peak_rss: int | None = None
    rss_source: str = ""
    errors: list[str] = field(default_factory=list)
    error: str | None = None
    concurrency: int = 1
    wall_s: float | None = None


def _predict_rows(arm, rows: Sequence[int], examples: Sequence[Example], out: ArmResult, check, strict: bool,
                  extra_seconds, done: Callable[[int], None] = lambda n: None) -> None:
    for i in rows:
        if check is not None:
            check()
        e = examples[i]
        t0 = time.perf_counter()
        try:
            p = np.asarray(arm.predict_proba([e.text], list(e.labels)), dtype=np.float64)
            if p.shape != (1, len(e.labels)) or not np.all(np.isfinite(p)):
                raise ValueError(f"shape {p.shape} for 1 document and {len(e.labels)} labels, or non-finite")
            out.probabilities[i] = p[0].tolist()
        except Exception as exc:  # one bad document must not end the arm (unless strict)
            if strict:
                raise
            out.probabilities[i] = None
            out.errors.append(f"{e.id!r}: {type(exc).__name__}: {exc}")
        out.seconds[i] = time.perf_counter() - t0 + (extra_seconds(e.text) if extra_seconds is not None else 0.0)
        done(1)


def _warm_up(arm, rows: Sequence[int], examples: Sequence[Example], n: int) -> None:
    for i in list(rows)[:n]:
        try:
            arm.predict_proba([examples[i].text], list(examples[i].labels))
        except Exception:  # noqa: BLE001 - the timed call records the error
            pass


def run_plan(arm, examples: Sequence[Example], plan: Plan, out: ArmResult, *, warmups: int = 0,
             check: Callable[[], None] | None = None, strict: bool = False,
             extra_seconds: Callable[[str], float] | None = None,
             on_rows: Callable[[int], None] | None = None) -> None:
    """Score a set-up ``arm`` on the plan's test rows into ``out``: the one arm runner.

    Zero-shot arms (``arm.trains`` False): ``predict_proba`` on every test row, one document per call,
    each call timed. Few-shot arms: ``arm.check_plan(number of folds)`` first (an arm may refuse: it
    raises), then per fold, ``fit`` on the fold's training rows (gold label strings;
    timed into ``out.fit_s``), then the same per-document calls on the fold's test rows only, so no arm
    is scored on a row it was fitted on. ``warmups`` untimed calls go first (results discarded).
    check: called before every fit and every document (raises to stop: a bake-off's deadline or cancel).
    strict: a failing document or fit raises (the service fails the arm); otherwise the document is
    recorded as failed (None, scored as uniform) and its error kept in ``out.errors``.
    extra_seconds: seconds added to a document's latency (the service's per-text embedding time).
    A zero-shot arm whose ``predict_documents`` answers (a server at a concurrency) scores all test rows
    in that one call instead (`Documents`).
    on_rows: called with the number of test rows just finished (scored, failed, or lost to a failed fit):
    the progress count, which reaches ``len(plan.test_rows)``.
    """
    done = on_rows if on_rows is not None else (lambda n: None)
    if not arm.trains:
        _warm_up(arm, plan.test_rows, examples, warmups)
        many = getattr(arm, "predict_documents", None)
        answers = many([examples[i] for i in plan.test_rows], lambda: done(1)) if many is not None else None
        if answers is None:
            _predict_rows(arm, plan.test_rows, examples, out, check, strict, extra_seconds, done)
            return
        for i, (probs, seconds, error) in zip(plan.test_rows, answers.rows):
            out.probabilities[i], out.seconds[i] = probs, seconds
            if error is not None:
                out.errors.append(f"{examples[i].id!r}: {error}")
        out.concurrency, out.wall_s = answers.concurrency, answers.wall_s
        return
    checker = getattr(arm, "check_plan", None)
    if checker is not None:
        checker(len(plan.folds))
    warmed = False
    for fold in plan.folds:
        if check is not None:
            check()
        t0 = time.perf_counter()
        try:
            arm.fit([examples[i].text for i in fold.train], [examples[i].labels[examples[i].label] for i in fold.train])
        except Exception as exc:  # the fold's rows are scored as failed
            if strict:
                raise
            out.errors.append(f"fit {fold.dataset} fold {fold.index}: {type(exc).__name__}: {exc}")
            out.probabilities.update({i: None for i in fold.test})
            out.seconds.update({i: float("nan") for i in fold.test})
            done(len(fold.test))
            continue
        elapsed = time.perf_counter() - t0
        replayed = getattr(arm, "last_fit_replay", lambda: None)()
        if replayed is None:
            out.fit_s += elapsed
        else:
            out.fit_s += replayed
            out.fits_replayed += 1
            out.replay_s += elapsed
        out.fits += 1
        if not warmed:
            _warm_up(arm, fold.test, examples, warmups)
            warmed = True
        _predict_rows(arm, fold.test, examples, out, check, strict, extra_seconds, done)


@dataclass
class Documents:
    """An arm's answers for many documents scored together (``Arm.predict_documents``).

    rows: per document ``(probabilities or None, seconds, error or None)``; concurrency: documents in
    flight at once; wall_s: wall time of them all.
    """

    rows: list[tuple[list[float] | None, float, str | None]]
    concurrency: int
    wall_s: float


def latency(result: ArmResult, rows: Sequence[int]) -> dict[str, float | None]:
    """p50/p95/mean ms per document, docs/s and the concurrency.

    docs/s is the documents over the summed per-document seconds (one at a time), or over ``wall_s``
    when several were in flight.
    """
    secs = np.array([result.seconds[i] for i in rows if math.isfinite(result.seconds.get(i, float("nan")))])
    if not secs.size:
        return {"p50_ms": None, "p95_ms": None, "mean_ms": None, "docs_per_s": None,
                "concurrency": result.concurrency}
    total = result.wall_s if result.wall_s is not None else float(secs.sum())
    return {"p50_ms": float(np.percentile(secs, 50) * 1000), "p95_ms": float(np.percentile(secs, 95) * 1000),
            "mean_ms": float(secs.mean() * 1000), "docs_per_s": float(secs.size / total) if total > 0 else None,
            "concurrency": result.concurrency}
