"""The dynamic batcher (`Batcher`): one queue of the tokenised work of all requests.

The queue holds items of one or more *kinds*, each with its own forward (`WorkKind`): the NLI (premise, hypothesis)
pairs (kind ``"nli"``, the default) and, when the served scoring has a cosine term, the texts and labels to embed
(kinds registered with ``kinds=``, see `zsnli.serving.service`). A batch holds items of one kind only; everything
below applies to each kind, and all kinds share the one forward thread: two forward threads would each start a full
intra-op thread pool and contend on a small CPU.

Requests are admitted against a capacity counted in NLI pairs (``admit``), then submit their already-tokenised items
(``submit``, one ``Job`` per kind) and await the jobs. One worker task forms batches from the pending items:

* anchored, fairly, in two steps, each a fair queue (`zsnli.serving.fair_queue.FairQueue`: how tags and the virtual
  time move; a batch row's padded width as its cost): first the *kind* of work (NLI pairs, texts or labels to embed)
  with the smallest tag, then, among its items, the oldest of the *group* (``submit(..., group=)``: one request's
  jobs) with the smallest tag; a row shared by identical items is charged to them in equal parts (`_row_charges`). A
  small request beside large ones (arrays of 64 documents, clients looping on arrays) waits about one of their
  batches for each kind of its work, and no group or kind starves; filled with the pending pairs closest to the
  anchor in length (little padding), under a padded-token budget: pairs x (longest length rounded up to 8) <=
  ``token_budget``, and a padding bound: the shortest row's padded width is at least (1 - ``max_padding``) of the
  longest (a 40-token text waits for a batch nearer its own length, not padded to a 256-token one);
* it waits at most ``max_wait_s`` after the oldest pair arrived for more work, unless a full batch is already
  pending (in fixed shapes: a width bucket with a forward's rows, `Batcher._full_batch_pending`);
* the forward runs in a dedicated thread (``run_in_executor``), so the event loop keeps accepting requests and
  tokenising while the model computes; each row of the result goes back to its job at the item's own index, so a
  request's items may be split over several batches in any order;
* identical items in one batch (the same token ids: e.g. the same label sent by several concurrent requests) are
  computed once and their row is given to each (``share_identical``, default on); the token budget counts the rows
  computed. A request's answer is what it would be alone, up to float rounding;
* priorities: a job submitted with ``priority`` > 0 (background work, e.g. a bake-off) only gets a batch when no
  pair of a lower priority value is pending, and never shares a batch with one, so ``/classify`` pairs (priority 0)
  always go first; among equal priorities the rules above apply.

Observers (``observers=``, e.g. `zsnli.serving.telemetry`) get a `BatchRecord` after every forward; an observer that
raises is logged and never disturbs batching. A failing forward fails exactly the jobs that had an item in that
batch (their other pending items are dropped) and the worker carries on. A cancelled job (client gone, timeout) has
its pending items dropped. Nothing is cached and nothing survives a job.

Fixed shapes (a `WorkKind` with ``shapes``, `zsnli.runtime.shapes`): a batch holds items of one width bucket only and
at most ``shapes.rows(width)`` rows, so queued work fills the forward's fixed shape before any filler row.

The records and errors come from `zsnli.serving.batch_types` (imported here, so still importable from here).
May import: numpy, `zsnli.runtime.model` (the pair record), `zsnli.runtime.shapes`, `zsnli.serving.batch_types`,
`zsnli.serving.fair_queue`. Used by `zsnli.serving.service`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import numpy as np

from ..runtime.model import Encoded
from ..runtime.shapes import FixedShapes
from .batch_types import (DEFAULT_KIND, BatchError, BatchObserver, BatcherClosed, BatcherStats, BatchRecord, ForwardFn,
                          Job, QueuedItem, QueueFull, WorkKind)
from .fair_queue import FairQueue

logger = logging.getLogger(__name__)


class Batcher:
    """Dynamic batching of NLI pairs (and other kinds of work) across concurrent requests (see module docstring).

    forward: ``f(list[Encoded]) -> np.ndarray [B, C]``, called in a worker thread: the ``"nli"`` kind.
    token_budget: max padded tokens per batch (rows x rounded longest length), every kind.
    max_wait_s: how long the oldest pending item may wait for company.
    capacity_pairs: max NLI pairs admitted and not yet answered (queued, tokenising or computing).
    num_outputs: C, the width of a logits row.
    kinds: more kinds of work, ``{name: WorkKind}`` (e.g. the sentence encoder's texts and labels);
        submitted with ``submit(..., kind=name)``; they share the queue, the budget and the thread.
    share_identical: compute identical items of one batch once (see module docstring).
    shapes: the fixed forward shapes of ``forward`` (`zsnli.runtime.shapes.FixedShapes`), None: none.
    max_padding: the largest fraction of a row that may be padding, in [0, 1] (1, the default: no
        bound; see module docstring; the server's ``ZSNLI_MAX_PADDING`` is measured in docs/performance.md).
    observers: called with a `BatchRecord` after each forward (the list is read live, so
        observers appended later are called too).
    Raises ``ValueError`` on a non-positive budget or capacity, a negative wait, ``max_padding``
    outside [0, 1], or a kind named ``"nli"`` in ``kinds``.
    """

    def __init__(self, forward: ForwardFn, *, token_budget: int = 16384, max_wait_s: float = 0.003,
                 capacity_pairs: int = 8192, num_outputs: int = 3, kinds: Mapping[str, WorkKind] | None = None,
                 share_identical: bool = True, max_padding: float = 1.0, observers: list[BatchObserver] | None = None,
                 shapes: FixedShapes | None = None) -> None:
        if token_budget <= 0 or capacity_pairs <= 0 or max_wait_s < 0 or not 0 <= max_padding <= 1:
            raise ValueError("token_budget and capacity_pairs must be > 0, max_wait_s >= 0, max_padding in [0, 1]")
        if kinds and DEFAULT_KIND in kinds:
            raise ValueError(f"kind {DEFAULT_KIND!r} is the batcher's own forward")
        self.kinds: dict[str, WorkKind] = {DEFAULT_KIND: WorkKind(forward, int(num_outputs), shapes), **(kinds or {})}
        self.token_budget = int(token_budget)
        self.max_wait_s = float(max_wait_s)
        self.capacity_pairs = int(capacity_pairs)
        self.num_outputs = int(num_outputs)
        self.share_identical = bool(share_identical)
        self.max_padding = float(max_padding)
        self.stats = BatcherStats()
        self.observers: list[BatchObserver] = observers if observers is not None else []
        self._pending: dict[int, QueuedItem] = {}  # insertion (arrival) order
        self._pending_tokens = {kind: 0 for kind in self.kinds}
        self._pending_count = {kind: 0 for kind in self.kinds}
        self._pending_bucket: dict[tuple[str, int], int] = {}  # (kind, width) -> items, for kinds in fixed shapes
        self._admitted = 0
        self._seq = itertools.count()
        self.fair = FairQueue()  # the groups' tags and the virtual time (module docstring)
        self.kind_fair = FairQueue()  # the kinds' tags: the first step of the anchor's choice
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
        """NLI pairs waiting in the queue (not yet in a batch)."""
        return self._pending_count[DEFAULT_KIND]

    def pending_items(self, kind: str) -> int:
        """Items of ``kind`` waiting in the queue. Raises ``KeyError`` on an unknown kind."""
        return self._pending_count[kind]

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

    def submit(self, encoded: Sequence[Encoded], priority: int = 0, kind: str = DEFAULT_KIND,
               group: object = None) -> Job:
        """Queue one request's items of one kind; returns its ``Job`` (await ``job.result()``).

        priority: 0 (default, interactive requests) goes first; a larger value waits (see module docstring).
        kind: ``"nli"`` (pairs for ``forward``) or a name given in ``kinds``.
        group: a hashable that the jobs sharing one place in the fair queue share (one request's
        jobs); default: the job alone (module docstring).
        Must be called on the batcher's event loop after ``start``.
        Raises ``BatcherClosed`` when stopped, ``ValueError`` on no items, ``KeyError`` on an unknown kind.
        """
        if self._closed or self._event is None:
            raise BatcherClosed("batcher is not running")
        if not encoded:
            raise ValueError("a job needs at least one pair")
        if kind not in self.kinds:
            raise KeyError(f"unknown kind of work {kind!r} (known: {', '.join(self.kinds)})")
        loop = asyncio.get_running_loop()
        n = len(encoded)
        width = self.kinds[kind].num_outputs
        job = Job(n=n, future=loop.create_future(), logits=np.zeros((n, width), np.float32), remaining=n, kind=kind)
        job.group = job if group is None else group
        self.fair.add(job.group, n)
        self.kind_fair.add(kind, n)
        now = time.monotonic()
        for i, enc in enumerate(encoded):
            p = QueuedItem(job, i, enc, self.kinds[kind].width(len(enc)), next(self._seq), now, int(priority), kind)
            job.pairs.append(p)
            self._pending[p.seq] = p
            self._pending_tokens[kind] += p.width
            self._pending_count[kind] += 1
            self._pending_bucket[(kind, p.width)] = self._pending_bucket.get((kind, p.width), 0) + 1
        self._event.set()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a job's pending items (client disconnected or timed out); its result is never set."""
        if not job.done:
            job.done = True
            self._drop_pending(job)
            if not job.future.done():
                job.future.cancel()

    # ------------------------------------------------------------------ internals

    def _unqueue(self, p: QueuedItem) -> bool:
        if self._pending.pop(p.seq, None) is None:
            return False
        self._pending_tokens[p.kind] -= p.width
        self._pending_count[p.kind] -= 1
        self._pending_bucket[(p.kind, p.width)] -= 1
        self.fair.remove(p.job.group)  # with nothing pending it leaves the line, keeping its tag
        self.kind_fair.remove(p.kind)
        return True

    def _drop_pending(self, job: Job) -> None:
        for p in job.pairs:
            if self._unqueue(p):
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

    def _urgent(self) -> list[QueuedItem]:
        """The pending items of the smallest priority value present, oldest first."""
        top = min(p.priority for p in self._pending.values())
        return [p for p in self._pending.values() if p.priority == top]

    def _take_batch(self) -> tuple[list[QueuedItem], list[int]]:
        """The anchor (of the most urgent items, those of the kind with the smallest tag, then the oldest
        of the group with the smallest tag) plus the pending items of its priority and kind nearest to it
        in length, under the budget; each row's group and kind is charged the batch's padded width and
        the virtual times advance (`FairQueue.served`). Returns the items and, for each, the row it reads
        (identical items share one row when ``share_identical``)."""
        pool = self._urgent()
        fair, kind_fair = self.fair, self.kind_fair
        anchor = min(pool, key=lambda p: (kind_fair.tag(p.kind), fair.tag(p.job.group), p.seq))
        anchor_tag, kind_tag = fair.tag(anchor.job.group), kind_fair.tag(anchor.kind)
        in_line = len({p.job.group for p in pool})
        kinds_in_line = len({p.kind for p in pool})
        shapes = self.kinds[anchor.kind].shapes
        candidates = sorted((p for p in pool if p.kind == anchor.kind and (shapes is None or p.width == anchor.width)),
                            key=lambda p: (p is not anchor, abs(p.width - anchor.width), p.seq))
        max_rows = shapes.rows(anchor.width) if shapes is not None else None
        rows: dict[object, int] = {}  # item key (or seq) -> row
        batch: list[QueuedItem] = []
        row_of: list[int] = []
        openers: list[QueuedItem] = []  # the item of each row that opened it
        width = reach = 0
        shortest = anchor.width
        full = False
        for p in candidates:
            distance = abs(p.width - anchor.width)
            if full and distance > reach:
                break  # identical items have their row's width: none further on
            key = p.key if self.share_identical else p.seq
            if key in rows:  # an identical item is already in the batch: free
                batch.append(p)
                row_of.append(rows[key])
                continue
            w = max(width, p.width)
            if rows and min(shortest, p.width) < (1.0 - self.max_padding) * w:
                continue  # too short or too long for the rows already in: it would be (or make) mostly padding
            if full or (rows and (w * (len(rows) + 1) > self.token_budget or len(rows) == max_rows)):
                if p.width <= width:
                    full = True  # no new row fits any more; identical items still may join
                continue  # a longer item would not fit, a shorter one still may
            rows[key] = len(rows)
            batch.append(p)
            openers.append(p)
            row_of.append(rows[key])
            width, reach, shortest = w, max(reach, distance), min(shortest, p.width)
        charges = _row_charges(batch, row_of, width)
        fair.served(anchor_tag, charges, in_line)
        kind_fair.served(kind_tag, {anchor.kind: width * len(openers)}, kinds_in_line)
        for p in batch:
            self._unqueue(p)
            p.job.started = True
        return batch, row_of

    def _full_batch_pending(self, kind: str) -> bool:
        """Whether a full forward of ``kind`` waits: its pending padded tokens reach the budget, or, in fixed
        shapes, some width bucket holds ``shapes.rows(width)`` items (a forward with no filler row; the budget
        counted over all buckets would call a queue of many part-filled buckets full)."""
        shapes = self.kinds[kind].shapes
        if shapes is None:
            return self._pending_tokens[kind] >= self.token_budget
        return any(n >= shapes.rows(w) for (k, w), n in self._pending_bucket.items() if k == kind)

    async def _next_batch(self) -> tuple[list[QueuedItem], list[int]]:
        assert self._event is not None
        while True:
            if not self._pending:
                self._event.clear()
                await self._event.wait()
                continue
            oldest = self._urgent()[0]
            wait_left = oldest.t + self.max_wait_s - time.monotonic()
            if wait_left > 0 and not self._full_batch_pending(oldest.kind):
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
            batch, row_of = await self._next_batch()
            kind = batch[0].kind
            work = self.kinds[kind]
            jobs = list(dict.fromkeys(p.job for p in batch))
            unique: dict[int, Encoded] = {}
            for p, row in zip(batch, row_of):
                unique.setdefault(row, p.enc)
            encs = [unique[r] for r in range(len(unique))]
            padded = work.padded_tokens(len(encs), max(work.width(len(e)) for e in encs))
            real = sum(len(e) for e in encs)
            t0 = time.monotonic()
            try:
                out = await loop.run_in_executor(self._executor, work.forward, encs)
                out = np.asarray(out)
                if out.shape != (len(encs), work.num_outputs):
                    raise RuntimeError(f"forward returned shape {out.shape}, expected {(len(encs), work.num_outputs)}")
            except asyncio.CancelledError:
                for job in jobs:
                    self._fail(job, BatcherClosed("server is shutting down"))
                raise
            except Exception as exc:  # noqa: BLE001 - a fault fails this batch only
                self._observe(BatchRecord(len(batch), padded, time.monotonic() - t0, False, kind, len(encs), real))
                self.stats.failed_batches += 1
                logger.exception("batch of %d %s items (%d requests) failed", len(batch), kind, len(jobs))
                err = BatchError(f"inference failed: {type(exc).__name__}: {exc}")
                for job in jobs:
                    self._fail(job, err)
                continue
            seconds = time.monotonic() - t0
            self._observe(BatchRecord(len(batch), padded, seconds, True, kind, len(encs), real))
            self._count(kind, len(batch), len(encs), padded, real)
            for job in jobs:
                job.inference_s += seconds  # the request's forward time (`zsnli.serving.request_timing`)
            for p, row in zip(batch, row_of):
                job = p.job
                if job.done:
                    continue
                job.logits[p.index] = out[row]
                job.remaining -= 1
                if job.remaining == 0:
                    job.done = True
                    if not job.future.done():
                        job.future.set_result(job.logits)

    def _count(self, kind: str, items: int, rows: int, padded: int, real: int) -> None:
        st = self.stats
        st.real_tokens += real
        st.batches += 1
        st.batches_by_kind[kind] = st.batches_by_kind.get(kind, 0) + 1
        st.pairs += items
        st.shared_items += items - rows
        st.padded_tokens += padded
        st.max_batch_pairs = max(st.max_batch_pairs, items)


def _row_charges(batch: Sequence[QueuedItem], row_of: Sequence[int], width: int) -> dict[object, float]:
    """What each group pays for a batch of rows ``width`` padded tokens wide: a row's width split evenly
    over the items it answers (an identical item sharing a row pays its part). Before issue 39 the item
    that opened a row paid all of it, and the opener was the oldest: requests sending the same items
    as an older one rode free, kept the smallest tags, and anchored batch after batch while a small
    request of another length waited for them all to finish."""
    readers: dict[int, int] = {}
    for row in row_of:
        readers[row] = readers.get(row, 0) + 1
    charges: dict[object, float] = {}
    for p, row in zip(batch, row_of):
        charges[p.job.group] = charges.get(p.job.group, 0.0) + width / readers[row]
    return charges
