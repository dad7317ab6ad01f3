"""The dynamic batcher: one queue of (premise, hypothesis) pairs from all requests.

Requests are admitted against a capacity counted in pairs (``admit``), then
submit their already-tokenised pairs (``submit``) and await a ``Job``. One
worker task forms batches from the pending pairs:

* anchored on the oldest pending pair (no starvation), filled with the
  pending pairs closest to it in length (little padding), under a padded-token
  budget: pairs x (longest length rounded up to 8) <= ``token_budget``;
* it waits at most ``max_wait_s`` after the oldest pair arrived for more
  work, unless a full batch is already pending;
* the forward runs in a dedicated thread (``run_in_executor``), so the event
  loop keeps accepting requests and tokenising while the model computes;
* each row of the result goes back to its job at the pair's own index, so a
  request's pairs may be split over several batches in any order;
* priorities: a job submitted with ``priority`` > 0 (background work, e.g. a
  bake-off) only gets a batch when no pair of a lower priority value is
  pending, and never shares a batch with one, so ``/classify`` pairs (priority
  0) always go first; among equal priorities the rules above apply.

Observers (``observers=``, e.g. `zsnli.serving.telemetry`) get a `BatchRecord` after
every forward: its pairs, padded tokens, seconds and outcome; an observer that
raises is logged and never disturbs batching.

A failing forward fails exactly the jobs that had a pair in that batch (their
other pending pairs are dropped) and the worker carries on. A cancelled job
(client gone, timeout) has its pending pairs dropped. Nothing is cached and
nothing survives a job.

May import: numpy, `zsnli.runtime.model` (the pair record and the padding rule).
Used by `zsnli.serving.service`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from ..runtime.model import Encoded, pad_to

logger = logging.getLogger(__name__)

ForwardFn = Callable[[Sequence[Encoded]], np.ndarray]


@dataclass(frozen=True)
class BatchRecord:
    """One forward as observers see it: ``pairs`` in the batch, ``padded_tokens`` (pairs x padded
    width, what the token budget bounds), ``seconds`` of wall time from handing the batch to the
    forward thread to its result, and ``ok`` (False: the forward raised or returned a wrong shape)."""

    pairs: int
    padded_tokens: int
    seconds: float
    ok: bool


BatchObserver = Callable[[BatchRecord], None]


class QueueFull(RuntimeError):
    """Admitting the request would exceed the queue capacity (answer 503 + Retry-After)."""


class BatchError(RuntimeError):
    """The forward pass of a batch holding one of the job's pairs failed."""


class BatcherClosed(RuntimeError):
    """The batcher was stopped before the job finished."""


@dataclass(eq=False)
class _Pair:
    job: "Job"
    index: int
    enc: Encoded
    width: int  # padded length
    seq: int
    t: float
    priority: int = 0


@dataclass(eq=False)
class Job:
    """The pairs of one request and, once done, their logits ``[n, C]`` in submission order."""

    n: int
    future: asyncio.Future
    logits: np.ndarray
    remaining: int
    pairs: list[_Pair] = field(default_factory=list)
    done: bool = False

    async def result(self) -> np.ndarray:
        """Wait for all pairs; returns float32 ``[n, C]``. Raises ``BatchError``/``BatcherClosed``."""
        return await asyncio.shield(self.future)


@dataclass
class BatcherStats:
    """Counters for logs and tests."""

    batches: int = 0
    pairs: int = 0
    padded_tokens: int = 0
    failed_batches: int = 0
    dropped_pairs: int = 0
    rejected_requests: int = 0
    max_batch_pairs: int = 0


class Batcher:
    """Dynamic batching of NLI pairs across concurrent requests (see module docstring).

    forward: ``f(list[Encoded]) -> np.ndarray [B, C]``, called in a worker thread.
    token_budget: max padded tokens per batch (pairs x rounded longest length).
    max_wait_s: how long the oldest pending pair may wait for company.
    capacity_pairs: max pairs admitted and not yet answered (queued, tokenising or computing).
    num_outputs: C, the width of a logits row.
    observers: called with a `BatchRecord` after each forward (the list is read live, so
        observers appended later are called too).
    """

    def __init__(
        self,
        forward: ForwardFn,
        *,
        token_budget: int = 16384,
        max_wait_s: float = 0.003,
        capacity_pairs: int = 8192,
        num_outputs: int = 3,
        observers: list[BatchObserver] | None = None,
    ) -> None:
        if token_budget <= 0 or capacity_pairs <= 0 or max_wait_s < 0:
            raise ValueError("token_budget and capacity_pairs must be > 0, max_wait_s >= 0")
        self._forward = forward
        self.token_budget = int(token_budget)
        self.max_wait_s = float(max_wait_s)
        self.capacity_pairs = int(capacity_pairs)
        self.num_outputs = int(num_outputs)
        self.stats = BatcherStats()
        self.observers: list[BatchObserver] = observers if observers is not None else []
        self._pending: dict[int, _Pair] = {}  # insertion (arrival) order
        self._pending_tokens = 0
        self._admitted = 0
        self._seq = itertools.count()
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the worker task (and its forward thread) on the running loop."""
        if self._task is not None:
            return
        self._event = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zsnli-forward")
        self._task = asyncio.create_task(self._run(), name="zsnli-batcher")

    async def close(self) -> None:
        """Stop the worker; pending jobs fail with ``BatcherClosed``."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for job in {p.job for p in self._pending.values()}:
            self._fail(job, BatcherClosed("server is shutting down"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def pending_pairs(self) -> int:
        """Pairs waiting in the queue (not yet in a batch)."""
        return len(self._pending)

    @property
    def admitted_pairs(self) -> int:
        """Pairs admitted and not yet released (queued, being tokenised or computed)."""
        return self._admitted

    # ------------------------------------------------------------------ admission

    @contextmanager
    def admit(self, n: int) -> Iterator[None]:
        """Reserve room for ``n`` pairs for the duration of the block.

        Raises ``QueueFull`` when ``admitted + n`` would exceed the capacity
        (or the batcher is closed); the reservation is released on exit.
        """
        if self._closed or self._admitted + n > self.capacity_pairs:
            self.stats.rejected_requests += 1
            raise QueueFull(f"queue full ({self._admitted} of {self.capacity_pairs} pairs admitted)")
        self._admitted += n
        try:
            yield
        finally:
            self._admitted -= n

    def submit(self, encoded: Sequence[Encoded], priority: int = 0) -> Job:
        """Queue one request's pairs; returns its ``Job`` (await ``job.result()``).

        priority: 0 (default, interactive requests) goes first; a larger value is
        served only while no pair of a smaller value is pending (see module docstring).
        Must be called on the batcher's event loop after ``start``.
        Raises ``BatcherClosed`` when stopped, ``ValueError`` on no pairs.
        """
        if self._closed or self._event is None:
            raise BatcherClosed("batcher is not running")
        if not encoded:
            raise ValueError("a job needs at least one pair")
        loop = asyncio.get_running_loop()
        n = len(encoded)
        job = Job(n=n, future=loop.create_future(), logits=np.zeros((n, self.num_outputs), np.float32), remaining=n)
        now = time.monotonic()
        for i, enc in enumerate(encoded):
            p = _Pair(job, i, enc, pad_to(len(enc)), next(self._seq), now, int(priority))
            job.pairs.append(p)
            self._pending[p.seq] = p
            self._pending_tokens += p.width
        self._event.set()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a job's pending pairs (client disconnected or timed out); its result is never set."""
        if not job.done:
            job.done = True
            self._drop_pending(job)
            if not job.future.done():
                job.future.cancel()

    # ------------------------------------------------------------------ internals

    def _drop_pending(self, job: Job) -> None:
        for p in job.pairs:
            if self._pending.pop(p.seq, None) is not None:
                self._pending_tokens -= p.width
                self.stats.dropped_pairs += 1

    def _fail(self, job: Job, exc: BaseException) -> None:
        if job.done:
            return
        job.done = True
        self._drop_pending(job)
        if not job.future.done():
            job.future.set_exception(exc)
            # The awaiting request may already be gone; don't warn about an unretrieved exception.
            job.future.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _observe(self, record: BatchRecord) -> None:
        for observer in self.observers:
            try:
                observer(record)
            except Exception:  # noqa: BLE001 - telemetry never breaks batching
                logger.exception("batch observer %r failed", observer)

    def _urgent(self) -> list[_Pair]:
        """The pending pairs of the smallest priority value present, oldest first."""
        top = min(p.priority for p in self._pending.values())
        return [p for p in self._pending.values() if p.priority == top]

    def _take_batch(self) -> list[_Pair]:
        """Oldest most-urgent pair plus the pending pairs of its priority nearest to it in length, under the budget."""
        pool = self._urgent()
        anchor = pool[0]
        candidates = sorted(pool, key=lambda p: (abs(p.width - anchor.width), p.seq))
        batch: list[_Pair] = []
        width = 0
        for p in candidates:
            w = max(width, p.width)
            if batch and w * (len(batch) + 1) > self.token_budget:
                if p.width > width:
                    continue  # a longer pair would not fit, a shorter one still may
                break
            batch.append(p)
            width = w
        for p in batch:
            del self._pending[p.seq]
            self._pending_tokens -= p.width
        return batch

    async def _next_batch(self) -> list[_Pair]:
        assert self._event is not None
        while True:
            if not self._pending:
                self._event.clear()
                await self._event.wait()
                continue
            oldest = self._urgent()[0]
            wait_left = oldest.t + self.max_wait_s - time.monotonic()
            if wait_left > 0 and self._pending_tokens < self.token_budget:
                self._event.clear()
                try:
                    await asyncio.wait_for(self._event.wait(), wait_left)
                except asyncio.TimeoutError:
                    pass
                continue
            return self._take_batch()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            jobs = list(dict.fromkeys(p.job for p in batch))
            padded = len(batch) * max(p.width for p in batch)
            t0 = time.monotonic()
            try:
                logits = await loop.run_in_executor(self._executor, self._forward, [p.enc for p in batch])
                logits = np.asarray(logits)
                if logits.shape != (len(batch), self.num_outputs):
                    raise RuntimeError(f"forward returned shape {logits.shape}, expected {(len(batch), self.num_outputs)}")
            except asyncio.CancelledError:
                for job in jobs:
                    self._fail(job, BatcherClosed("server is shutting down"))
                raise
            except Exception as exc:  # noqa: BLE001 - a fault fails this batch only
                self._observe(BatchRecord(len(batch), padded, time.monotonic() - t0, False))
                self.stats.failed_batches += 1
                logger.exception("batch of %d pairs (%d requests) failed", len(batch), len(jobs))
                err = BatchError(f"inference failed: {type(exc).__name__}: {exc}")
                for job in jobs:
                    self._fail(job, err)
                continue
            self._observe(BatchRecord(len(batch), padded, time.monotonic() - t0, True))
            self.stats.batches += 1
            self.stats.pairs += len(batch)
            self.stats.padded_tokens += padded
            self.stats.max_batch_pairs = max(self.stats.max_batch_pairs, len(batch))
            for row, p in enumerate(batch):
                job = p.job
                if job.done:
                    continue
                job.logits[p.index] = logits[row]
                job.remaining -= 1
                if job.remaining == 0:
                    job.done = True
                    if not job.future.done():
                        job.future.set_result(job.logits)
