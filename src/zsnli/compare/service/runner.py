"""Run one bake-off: every requested arm on the same examples, under a time budget -> the answer dict.

Every arm runs through the comparison engine's arm runner (`zsnli.compare.engine.run_plan`) in a
worker thread, under the one fold rule (`zsnli.compare.protocol.make_plan` with `SERVICE_PROTOCOL`):
zero-shot arms score every example as it is; few-shot arms are fitted per fold and score only the
fold's held-out examples, so no arm is ever fitted on the example it is scored on. Per-document
latency is the wall time of scoring that one document (for arms on sentence embeddings, plus the time
to embed it alone); the served-model arms call ``ZeroShotClassifier.classify`` on the server's loop at
background priority and are measured under whatever load the server has.

Time budget: before the request is admitted, its plan is estimated (`estimate`, the cost model of
`zsnli.compare.budget`) and refused (a 422, in ``zsnli.compare.service.api``) when the estimate exceeds the
budget. At run time the arms get ``time_budget_s`` from the start of `run_bakeoff`; an arm still running at
the deadline is ``failed`` with that reason and the arms after it are not started (``not started: ...``).
The answer says so where it names the winner: ``arms_run`` (requested, finished, and each arm that did not
finish with its reason, also signed in the receipt's ``not_run``) and ``verdict``
(`zsnli.compare.render.winner_line`: "Winner among 5 of 11 arms: ..."). The answer then
needs only ranking, signing and storing, so it comes within the budget plus `GRACE_S`. Work in
threads stops cooperatively: every loop of it (embedding the examples, each fold's fit, each
document's prediction) checks the bake-off's `CancelToken`, which trips at the deadline and when the
bake-off is cancelled (the client left, the server drains), so no timed-out or abandoned arm keeps a
worker thread past the step it was in; a served-model arm's ``classify`` is cancelled with it
(`CancelToken.wait`), which drops its queued pairs from the batcher. Nothing blocking runs on the event
loop (arm construction, which may load a challenger model, and receipt identities, which may hash model
files, run in the worker thread).

Imports `zsnli.compare.engine`, `zsnli.compare.bakeoff_analysis` (the arm view's figures), `zsnli.compare.receipts`,
`zsnli.compare.budget` (the estimate), `zsnli.compare.render` (the verdict's words), `protocol`, `arms_adapter`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import threading
import time
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from zsnli.compare import budget
from zsnli.compare.bakeoff_analysis import arm_details
from zsnli.compare.engine import ArmResult, run_plan
from zsnli.compare.render import board, winner_line

from .arms_adapter import (EMBEDDING_ARMS, NLI_TEMPLATES, EmbeddingCache, ServedModel, arm_kind, arm_type, build_arm,
                           receipt_identity)
from .protocol import Task, p50_ms, p95_ms, rank, score
from zsnli.compare.receipts import Signer, seal


GRACE_S = 2.0
"""Seconds past the time budget the answer may take: ranking, signing and storing after the deadline."""


class BudgetExceeded(RuntimeError):
    """The bake-off's time budget ran out while an arm was running."""


class Cancelled(RuntimeError):
    """The bake-off was cancelled (client gone, server draining): its thread work stops."""


class CancelToken:
    """Cooperative stop for one bake-off's thread work: `check` raises `BudgetExceeded` past ``deadline``
    (``time.monotonic()`` seconds) and `Cancelled` once `cancel` was called; `wait` waits for a future
    under the same two conditions. Thread-safe."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._waiting: set[concurrent.futures.Future] = set()

    def cancel(self) -> None:
        """Trip the token; the futures being waited for are cancelled (their queued work is dropped)."""
        self._cancelled.set()
        with self._lock:
            waiting = list(self._waiting)
        for fut in waiting:
            fut.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def left(self) -> float:
        """Seconds to the deadline (0 when past it)."""
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        if self._cancelled.is_set():
            raise Cancelled()
        if time.monotonic() > self.deadline:
            raise BudgetExceeded()

    def wait(self, fut: concurrent.futures.Future) -> Any:
        """``fut``'s result (a thread waiting on work scheduled on the event loop). At the deadline or on
        `cancel` the future is cancelled and `BudgetExceeded` / `Cancelled` raised."""
        with self._lock:
            self._waiting.add(fut)
        try:
            if self.cancelled:
                fut.cancel()
            return fut.result(timeout=self.left())
        except concurrent.futures.TimeoutError:
            fut.cancel()
            self.check()
            raise BudgetExceeded() from None
        except concurrent.futures.CancelledError:
            self.check()
            raise Cancelled() from None
        finally:
            with self._lock:
                self._waiting.discard(fut)


@dataclass
class RunContext:
    """What one bake-off needs from the server.

    served: the served model (None while loading: its arms fail); encoder_factory: returns
    ``(SentenceEncoder, digest)`` or raises (embedding arms then fail); local_models: registered challenger
    name -> its shared, set-up arm (may load it: called in a worker thread); executor: threads for the arms'
    work, never the store's or the pages'; time_budget_s: the arms' budget; sign_executor: where the receipt
    is signed (default ``executor``).
    """

    served: ServedModel | None
    encoder_factory: Callable[[], tuple[Any, str]] | None
    local_models: dict[str, Callable[[], Any]]
    executor: Executor
    time_budget_s: float
    sign_executor: Executor | None = None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _run_sync(arm, task: Task, cache: EmbeddingCache | None, token: CancelToken
              ) -> tuple[np.ndarray, list[float], float | None]:
    """An arm over all examples (thread), by the engine's arm runner under `SERVICE_PROTOCOL`'s folds.

    Returns ``[n, k]`` probabilities, per-document seconds (for arms on sentence embeddings, plus the
    time to embed the document alone) and the seconds spent fitting over all folds (None for a zero-shot arm). ``token`` is checked before every fit and every document (raises
    `BudgetExceeded` / `Cancelled`); any failing document fails the arm.
    """
    examples = task.examples()
    out = ArmResult(arm.name, arm.type_name, arm.trains, str(arm.cost))
    extra = (lambda text: cache.seconds.get(text, 0.0)) if arm.uses_encoder and cache is not None else None
    run_plan(arm, examples, task.plan(), out, check=token.check, strict=True, extra_seconds=extra)
    probs = np.array([out.probabilities[i] for i in range(task.n)], dtype=np.float64)
    return probs, [out.seconds[i] for i in range(task.n)], (out.fit_s if arm.trains else None)


def _entry(name: str, role: str, task: Task, probs=None, seconds=None, error: str | None = None,
           fit_s: float | None = None) -> dict:
    """One scorecard entry: its kind (`arm_kind`, also for a failed arm), the figures of `score`, p50 latency, fit
    seconds (None: zero-shot) and, for the page's arm view, `zsnli.compare.bakeoff_analysis.arm_details`
    (coverage, per-class F1, confusions, worst slices)."""
    if error is not None:
        return {"arm": name, "role": role, "kind": arm_kind(name), "accuracy": None, "macro_f1": None, "ece": None,
                "n": 0, "latency_ms_p50": None, "status": "failed", "error": error}
    s = score(probs, task.gold)
    entry = {"arm": name, "role": role, "kind": arm_kind(name), "accuracy": s["accuracy"], "macro_f1": s["macro_f1"],
             "ece": s["ece"],
             "n": s["n"], "latency_ms_p50": p50_ms(seconds), "latency_ms_p95": p95_ms(seconds), "fit_s": fit_s,
             "status": "scored", "reliability": s["reliability"],
             **arm_details(probs, task.gold, s["predicted"], task.label_names, task.texts)}
    if task.retain:
        entry["predictions"] = [
            {"expected": task.label_names[int(task.gold[i])], "predicted": task.label_names[int(s["predicted"][i])],
             "probabilities": [round(float(p), 4) for p in probs[i]]} for i in range(task.n)]
    return entry


async def _embed_all(ctx: RunContext, task: Task, token: CancelToken) -> tuple[EmbeddingCache | None, str | None]:
    """The bake-off's embedding cache with every example embedded alone (timed), or the reason it failed."""
    if ctx.encoder_factory is None:
        return None, "no sentence encoder is configured"
    loop = asyncio.get_running_loop()
    try:
        encoder, digest = await asyncio.wait_for(loop.run_in_executor(ctx.executor, ctx.encoder_factory),
                                                 token.left())
        cache = EmbeddingCache(encoder, digest)
        await asyncio.wait_for(loop.run_in_executor(
            ctx.executor, lambda: cache.embed(task.texts, timed=True, check=token.check)), token.left())
        return cache, None
    except (asyncio.TimeoutError, BudgetExceeded):
        if token.cancelled:
            raise Cancelled() from None
        return None, "time budget exceeded while embedding the examples"  # the thread stops at its next text
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - reported on each embedding arm
        return None, f"sentence encoder unavailable: {_one_line(exc)}"


def _build_and_run(name: str, ctx: RunContext, task: Task, cache, token: CancelToken):
    """Thread: build an arm (which may load a challenger model), run it, and take its receipt identity."""
    token.check()
    arm = build_arm(name, served=ctx.served, cache=cache, local_models=ctx.local_models, waiter=token)
    probs, seconds, fit_s = _run_sync(arm, task, cache, token)
    return probs, seconds, fit_s, receipt_identity(arm)


async def _run_arm(name: str, ctx: RunContext, task: Task, cache, token: CancelToken):
    """``(probabilities, seconds, fit seconds or None, receipt identity)``; raises on failure, `BudgetExceeded` at the deadline."""
    loop = asyncio.get_running_loop()
    try:
        return await asyncio.wait_for(loop.run_in_executor(ctx.executor, _build_and_run, name, ctx, task, cache, token),
                                      token.left())
    except asyncio.TimeoutError:
        raise BudgetExceeded() from None


def estimate(task: Task, nli_window: int = budget.NLI_WINDOW,
             scoring: dict[str, Any] | None = None) -> budget.Estimate:
    """The plan's cost before anything runs (`zsnli.compare.budget`): each requested arm's seconds on the task's
    folds (`Task.plan`), the embedding arms sharing one pass of the sentence encoder over the examples (as
    `_embed_all` does). ``nli_window``: the served model's window in tokens; ``scoring``: its served scoring
    (``describe()["scoring"]``: the label cascade and cosine term of the served-model arms)."""
    shape = budget.PlanShape.of(task.examples(), task.plan())
    arms = {}
    for name in task.arms:
        type_name, params = arm_type(name)
        if name in NLI_TEMPLATES:
            params = {**params, "scoring": scoring}
        template = params.get("hypothesis_template", "{}")
        arms[name] = budget.arm_seconds(type_name, params, shape, nli_window=nli_window, shared_encoder=True,
                                        template_chars=len(template) - 2)
    users = frozenset(a for a in task.arms if a in EMBEDDING_ARMS)
    return budget.Estimate(arms, budget.encoder_seconds(shape) if users else 0.0, users)


def arms_run(task: Task, entries: list[dict]) -> dict[str, Any]:
    """``{"requested", "finished", "not_finished": {arm: reason}}`` of a bake-off's scorecard ``entries``."""
    not_finished = {e["arm"]: e["error"] for e in entries if e["status"] != "scored"}
    return {"requested": len(task.arms), "finished": len(task.arms) - len(not_finished), "not_finished": not_finished}


def _run_order(names: list[str]) -> list[str]:
    """Cheap arms first, so that a budget overrun costs the expensive ones."""
    cost = {"majority": 0, "keyword_rules": 0, "tfidf_logreg": 1, "tfidf_linearsvc": 1, "tfidf_linearsvc_raw": 1,
            "char_nb": 1}
    return sorted(names, key=lambda a: cost.get(a, 3 if a in NLI_TEMPLATES else 2))


async def run_bakeoff(task: Task, ctx: RunContext, signer: Signer) -> dict[str, Any]:
    """Run ``task``'s arms; returns the answer (id, created_at, ..., scorecard, winner, receipt).

    The arms get ``ctx.time_budget_s``; the answer follows within `GRACE_S` more (module docstring).
    Cancelling the task (client gone, drain) trips the bake-off's `CancelToken`, so its thread work stops
    at its next step. Raises ``receipts.ReceiptError`` when the receipt cannot be signed (the caller
    answers 503).
    """
    t_start = time.monotonic()
    token = CancelToken(t_start + ctx.time_budget_s)
    try:
        return await _run(task, ctx, signer, token)
    except BaseException:
        token.cancel()
        raise


async def _run(task: Task, ctx: RunContext, signer: Signer, token: CancelToken) -> dict[str, Any]:
    created_at = _now()
    needs_embedding = any(a in EMBEDDING_ARMS for a in task.arms)
    cache, cache_error = (await _embed_all(ctx, task, token)) if needs_embedding else (None, None)
    entries, identities = [], {}
    for name in _run_order(task.arms):
        role = "challenger" if name == task.challenger else "incumbent"
        if name in EMBEDDING_ARMS and cache is None:
            entries.append(_entry(name, role, task, error=cache_error))
            continue
        if token.left() <= 0 and not token.cancelled:
            entries.append(_entry(name, role, task, error=f"not started: the time budget of {ctx.time_budget_s:g} s "
                                  "(ZSNLI_BAKEOFF_TIME_BUDGET_S) was spent by the arms before it"))
            continue
        try:
            probs, seconds, fit_s, identities[name] = await _run_arm(name, ctx, task, cache, token)
            entries.append(_entry(name, role, task, probs, seconds, fit_s=fit_s))
        except BudgetExceeded:
            entries.append(_entry(name, role, task, error=f"time budget of {ctx.time_budget_s:g} s exceeded "
                                  "(ZSNLI_BAKEOFF_TIME_BUDGET_S)"))
        except Cancelled:
            raise asyncio.CancelledError() from None
        except Exception as exc:  # noqa: BLE001 - one arm's fault fails that arm only
            entries.append(_entry(name, role, task, error=_one_line(exc)))
    token.cancel()  # nothing may run on in a thread once the arms are done
    ranked = rank(entries)
    winner = ranked[0]["arm"] if ranked and ranked[0]["status"] == "scored" else None
    answer = {"id": "bo_" + uuid.uuid4().hex, "created_at": created_at, "task_description": task.task_description,
              "labels": dict(zip(task.label_names, task.hypotheses)), "n": task.n, "scorecard": ranked,
              "winner": winner, "arms_run": arms_run(task, entries)}
    answer["verdict"] = winner_line(answer, board(answer))
    answer["receipt"] = await asyncio.get_running_loop().run_in_executor(
        ctx.sign_executor or ctx.executor, seal, answer, task.examples_sha256, identities, signer,
        answer["arms_run"]["not_finished"])
    return answer
