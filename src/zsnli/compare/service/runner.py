"""Run one bake-off: every requested arm on the same examples, under a time budget -> the answer dict.

Zero-shot arms score every example as it is. Few-shot arms are fitted per fold of
`protocol.cv_folds` and score only the fold's held-out examples, so no arm is ever fitted on the
example it is scored on. Per-document latency is the wall time of scoring that one document (for
arms on sentence embeddings, plus the time to embed it alone); the served-model arms go through the
server's batcher at background priority and are measured under whatever load the server has.

The bake-off gets ``time_budget_s`` in all; an arm still running at the deadline is ``failed`` with
that reason, and the arms after it are not started. Imports `protocol`, `arms_adapter`, `receipts`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .arms_adapter import (EMBEDDING_ARMS, NLI_TEMPLATES, BatchedNliArm, EmbeddingCache, NliService, build_arm,
                           receipt_identity)
from .protocol import Task, cv_folds, p50_ms, rank, score
from .receipts import RECEIPT_VERSION, Signer, receipt_payload


class BudgetExceeded(RuntimeError):
    """The bake-off's time budget ran out while an arm was running."""


@dataclass
class RunContext:
    """What one bake-off needs from the server.

    service: the served model (None while loading: its arms fail); encoder_factory: returns
    ``(SentenceEncoder, digest)`` or raises (embedding arms then fail); local_models: registered challenger
    name -> its shared, set-up arm; executor: threads for the CPU arms; time_budget_s: the whole bake-off's budget.
    """

    service: NliService | None
    encoder_factory: Callable[[], tuple[Any, str]] | None
    local_models: dict[str, Callable[[], Any]]
    executor: Executor
    time_budget_s: float


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _run_sync(arm, task: Task, cache: EmbeddingCache | None, deadline: float) -> tuple[np.ndarray, list[float]]:
    """A CPU arm over all examples (thread). Returns ``[n, k]`` probabilities and per-document seconds."""
    n, k = task.n, len(task.label_names)
    probs, seconds = np.zeros((n, k)), [0.0] * n
    zero_shot = not arm.trains
    labels = task.hypotheses if zero_shot else task.label_names
    folds = [(np.array([], dtype=int), np.arange(n))] if zero_shot else cv_folds(task.gold)[0]
    for train, test in folds:
        if time.monotonic() > deadline:
            raise BudgetExceeded()
        if not zero_shot:
            arm.fit([task.texts[i] for i in train], [task.label_names[task.gold[i]] for i in train])
        for i in test:
            t0 = time.perf_counter()
            probs[i] = arm.predict_proba([task.texts[i]], labels)[0]
            seconds[i] = time.perf_counter() - t0
            if arm.uses_encoder and cache is not None:
                seconds[i] += cache.seconds.get(task.texts[i], 0.0)
    return probs, seconds


async def _run_nli(arm: BatchedNliArm, task: Task, deadline: float) -> tuple[np.ndarray, list[float]]:
    probs, seconds = np.zeros((task.n, len(task.label_names))), []
    for i, text in enumerate(task.texts):
        left = deadline - time.monotonic()
        if left <= 0:
            raise BudgetExceeded()
        t0 = time.perf_counter()
        try:
            probs[i] = await asyncio.wait_for(arm.apredict(text, task.hypotheses), left)
        except asyncio.TimeoutError:
            raise BudgetExceeded() from None
        seconds.append(time.perf_counter() - t0)
        if arm.uses_encoder and arm.cache is not None:
            seconds[-1] += arm.cache.seconds.get(text, 0.0)
    return probs, seconds


def _entry(name: str, role: str, task: Task, probs=None, seconds=None, error: str | None = None) -> dict:
    if error is not None:
        return {"arm": name, "role": role, "accuracy": None, "macro_f1": None, "ece": None, "n": 0,
                "latency_ms_p50": None, "status": "failed", "error": error}
    s = score(probs, task.gold)
    entry = {"arm": name, "role": role, "accuracy": s["accuracy"], "macro_f1": s["macro_f1"], "ece": s["ece"],
             "n": s["n"], "latency_ms_p50": p50_ms(seconds), "status": "scored", "reliability": s["reliability"]}
    if task.retain:
        entry["predictions"] = [
            {"expected": task.label_names[int(task.gold[i])], "predicted": task.label_names[int(s["predicted"][i])],
             "probabilities": [round(float(p), 4) for p in probs[i]]} for i in range(task.n)]
    return entry


async def _embed_all(ctx: RunContext, task: Task, deadline: float) -> tuple[EmbeddingCache | None, str | None]:
    """The bake-off's embedding cache with every example embedded alone (timed), or the reason it failed."""
    if ctx.encoder_factory is None:
        return None, "no sentence encoder is configured"
    loop = asyncio.get_running_loop()
    try:
        encoder, digest = await loop.run_in_executor(ctx.executor, ctx.encoder_factory)
        cache = EmbeddingCache(encoder, digest)
        await asyncio.wait_for(loop.run_in_executor(ctx.executor, lambda: cache.embed(task.texts, timed=True)),
                               max(0.0, deadline - time.monotonic()))
        return cache, None
    except asyncio.TimeoutError:
        return None, "time budget exceeded while embedding the examples"
    except Exception as exc:  # noqa: BLE001 - reported on each embedding arm
        return None, f"sentence encoder unavailable: {_one_line(exc)}"


async def _run_arm(name: str, ctx: RunContext, task: Task, cache, deadline: float):
    """``(arm, probabilities, seconds)``; raises on failure."""
    arm = build_arm(name, service=ctx.service, cache=cache, local_models=ctx.local_models)
    if isinstance(arm, BatchedNliArm):
        return arm, *await _run_nli(arm, task, deadline)
    loop = asyncio.get_running_loop()
    try:
        result = await asyncio.wait_for(loop.run_in_executor(ctx.executor, _run_sync, arm, task, cache, deadline),
                                        max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        raise BudgetExceeded() from None
    return arm, *result


def _run_order(names: list[str]) -> list[str]:
    """Cheap arms first, so that a budget overrun costs the expensive ones."""
    cost = {"majority": 0, "tfidf_logreg": 1}
    return sorted(names, key=lambda a: cost.get(a, 3 if a in NLI_TEMPLATES else 2))


async def run_bakeoff(task: Task, ctx: RunContext, signer: Signer) -> dict[str, Any]:
    """Run ``task``'s arms; returns the answer (id, created_at, ..., scorecard, winner, receipt).

    Raises ``receipts.ReceiptError`` when the receipt cannot be signed (the caller answers 503).
    """
    t_start = time.monotonic()
    deadline = t_start + ctx.time_budget_s
    created_at = _now()
    needs_embedding = any(a in EMBEDDING_ARMS for a in task.arms) or (
        ctx.service is not None and ctx.service.scoring.embedding_weight != 0
        and any(a in NLI_TEMPLATES for a in task.arms))
    cache, cache_error = (await _embed_all(ctx, task, deadline)) if needs_embedding else (None, None)
    entries, identities = [], {}
    for name in _run_order(task.arms):
        role = "challenger" if name == task.challenger else "incumbent"
        if name in EMBEDDING_ARMS and cache is None:
            entries.append(_entry(name, role, task, error=cache_error))
            continue
        try:
            arm, probs, seconds = await _run_arm(name, ctx, task, cache, deadline)
            identities[name] = receipt_identity(arm)
            entries.append(_entry(name, role, task, probs, seconds))
        except BudgetExceeded:
            entries.append(_entry(name, role, task, error=f"time budget of {ctx.time_budget_s:g} s exceeded "
                                  "(ZSNLI_BAKEOFF_TIME_BUDGET_S)"))
        except Exception as exc:  # noqa: BLE001 - one arm's fault fails that arm only
            entries.append(_entry(name, role, task, error=_one_line(exc)))
    ranked = rank(entries)
    winner = ranked[0]["arm"] if ranked and ranked[0]["status"] == "scored" else None
    answer = {"id": "bo_" + uuid.uuid4().hex, "created_at": created_at, "task_description": task.task_description,
              "labels": dict(zip(task.label_names, task.hypotheses)), "n": task.n, "scorecard": ranked,
              "winner": winner}
    receipt = signer.sign(receipt_payload(answer, task.examples_sha256, identities))
    answer["receipt"] = {"version": RECEIPT_VERSION, **receipt, "examples_sha256": task.examples_sha256,
                         "arms": identities}
    return answer
