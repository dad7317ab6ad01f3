"""The batcher's records: a kind of work (`WorkKind`), a queued item (`QueuedItem`), one request's items of one kind
(`Job`), what observers see of a forward (`BatchRecord`), the counters (`BatcherStats`) and the errors.
May import: numpy, `zsnli.runtime.model` (the pair record and the padding rule), `zsnli.runtime.shapes`,
`zsnli.serving.request_timing` (a job registers with its request's `RequestTiming`).
Imported by `zsnli.serving.batching` (which re-exports them).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..runtime.model import Encoded, pad_to
from ..runtime.shapes import FixedShapes
from .request_timing import current_timing

ForwardFn = Callable[[Sequence[Encoded]], np.ndarray]

#: The kind of the constructor's own ``forward``: NLI (premise, hypothesis) pairs.
DEFAULT_KIND = "nli"


@dataclass(frozen=True)
class WorkKind:
    """One kind of queued work: ``forward(list[Encoded]) -> float32 [B, num_outputs]`` (run in the
    forward thread), the width of its output rows and, when its forward runs in fixed shapes, those
    shapes (`zsnli.runtime.shapes.FixedShapes`: batches are then formed per width bucket)."""

    forward: ForwardFn
    num_outputs: int
    shapes: FixedShapes | None = None

    def width(self, n: int) -> int:
        """The padded width of an item of ``n`` tokens: its bucket, or ``n`` rounded up to 8 (`pad_to`)."""
        return self.shapes.width(n) if self.shapes is not None else pad_to(n)

    def padded_tokens(self, rows: int, width: int) -> int:
        """Tokens a forward of ``rows`` distinct items of padded ``width`` computes (filler rows included)."""
        if self.shapes is None:
            return rows * width
        per = self.shapes.rows(width)
        return -(-rows // per) * per * width


@dataclass(frozen=True)
class BatchRecord:
    """One forward as observers see it: ``pairs`` (items answered by the batch: pairs for ``nli``,
    sequences for other kinds), ``padded_tokens`` (rows computed x padded width, what the token
    budget bounds), ``seconds`` of wall time from handing the batch to the forward thread to its
    result, ``ok`` (False: the forward raised or returned a wrong shape), ``kind`` (which
    `WorkKind`), ``rows`` (distinct items computed; fewer than ``pairs`` when identical items
    shared a row) and ``tokens`` (the real tokens of those rows, padding and filler rows left out:
    ``padded_tokens / tokens`` is the forward's padding factor)."""

    pairs: int
    padded_tokens: int
    seconds: float
    ok: bool
    kind: str = DEFAULT_KIND
    rows: int | None = None
    tokens: int | None = None


BatchObserver = Callable[[BatchRecord], None]


class QueueFull(RuntimeError):
    """Admitting the request would exceed the queue capacity (answer 503 + Retry-After)."""


class BatchError(RuntimeError):
    """The forward pass of a batch holding one of the job's pairs failed."""


class BatcherClosed(RuntimeError):
    """The batcher was stopped before the job finished."""


@dataclass(eq=False)
class QueuedItem:
    """One queued item (an NLI pair, or a sequence of another kind) of a `Job`, at ``index`` there."""

    job: "Job"
    index: int
    enc: Encoded
    width: int  # padded length
    seq: int
    t: float
    priority: int = 0
    kind: str = DEFAULT_KIND

    @functools.cached_property
    def key(self) -> tuple:
        """What makes two items identical: their token ids and segment ids."""
        return (tuple(self.enc.input_ids), tuple(self.enc.token_type_ids or ()))


@dataclass(eq=False)
class Job:
    """The items of one request of one kind and, once done, their output rows ``[n, C]`` in
    submission order (``logits`` for NLI pairs, embeddings for the embedding kinds)."""

    n: int
    future: asyncio.Future
    logits: np.ndarray
    remaining: int
    pairs: list[QueuedItem] = field(default_factory=list)
    done: bool = False
    kind: str = DEFAULT_KIND
    #: Its group in the fair queue of anchors (see `zsnli.serving.batching`); the job itself by default.
    group: object = None
    #: True once one of its items was taken into a batch (its work has begun: see `zsnli.serving.service`).
    started: bool = False
    #: ``time.monotonic()`` when it was made (submitted) and when its future completed (None before).
    submitted_at: float = field(default_factory=time.monotonic)
    finished_at: float | None = None
    #: Seconds of the forwards that held its items (each forward counted once; added by the batcher).
    inference_s: float = 0.0

    def __post_init__(self) -> None:
        """Register with the request's `zsnli.serving.request_timing.RequestTiming`, if any, and note when
        the future completes (result, error or cancel)."""
        timing = current_timing()
        if timing is not None:
            timing.jobs.append(self)
        self.future.add_done_callback(lambda _: setattr(self, "finished_at", time.monotonic()))

    async def result(self) -> np.ndarray:
        """Wait for all items; returns float32 ``[n, C]``. Raises ``BatchError``/``BatcherClosed``."""
        return await asyncio.shield(self.future)


@dataclass
class BatcherStats:
    """Counters for logs and tests (over every kind; ``pairs`` counts items of any kind;
    ``shared_items``: items answered with an identical item's row; ``batches_by_kind``; ``real_tokens``:
    the tokens of the rows computed, against ``padded_tokens`` computed with padding and filler rows)."""

    batches: int = 0
    pairs: int = 0
    padded_tokens: int = 0
    real_tokens: int = 0
    failed_batches: int = 0
    dropped_pairs: int = 0
    rejected_requests: int = 0
    max_batch_pairs: int = 0
    shared_items: int = 0
    batches_by_kind: dict[str, int] = field(default_factory=dict)
