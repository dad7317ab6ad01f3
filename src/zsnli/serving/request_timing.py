"""Where one request's time went, as text-embeddings-inference (TEI) reports it: `RequestTiming`, the timing
headers (`TimingMiddleware`) and the hooks that fill it without threading it through every call.

A request on a timed route (`TIMED_PATHS`) gets one `RequestTiming` in a context variable
(`current_timing`) for its whole life:

* the tokeniser thread's work done for it is timed by `TimedExecutor` (the service's tokeniser pool):
  ``tokenization_s``;
* every batcher job it submits registers itself (`zsnli.serving.batch_types.Job` calls `current_timing`
  when it is made, in the request's task or a task it started): the job's submit and finish times and the
  seconds of the forwards that held its items (`zsnli.serving.batching.Batcher` adds each forward's time to
  every job in the batch). `RequestTiming.inference_s` is the sum of those forwards, ``queue_s`` the time
  its jobs were in the batcher (the union of their submit-to-finish intervals) less that, and
  ``compute_tokens`` the tokens of every item computed for it (pairs, texts and labels to embed);
* the route notes ``method`` (``single``/``batch``, TEI's label) and ``compute_chars``.

On a 2xx answer `TimingMiddleware` sends TEI's headers (`timing_headers`, whole milliseconds, TEI's unit):
``x-compute-time`` and ``x-total-time`` (the request's wall time up to its answer), ``x-compute-characters``,
``x-compute-tokens``, ``x-tokenization-time``, ``x-queue-time`` and ``x-inference-time``; TEI averages the
last three over the inputs of a batch request, so they are divided by the number of inputs noted by the
route. Then every observer (``observers``: `zsnli.serving.telemetry`'s ``te_*`` series) gets
``(path, status, timing)``, on every status.

May import: the standard library only (so `zsnli.serving.batch_types` may import it). Imported by
`zsnli.serving.app`, `zsnli.serving.lifecycle`, `zsnli.serving.batch_types`, the route modules and
`zsnli.serving.telemetry`.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: The routes whose answers carry TEI's timing headers and count in the ``te_request_*`` series.
TIMED_PATHS = frozenset({"/predict", "/classify", "/embed", "/v1/embeddings"})

_CURRENT: contextvars.ContextVar["RequestTiming | None"] = contextvars.ContextVar("zsnli_request_timing",
                                                                                  default=None)


def current_timing() -> "RequestTiming | None":
    """The `RequestTiming` of the request being answered in this context (None outside a timed route)."""
    return _CURRENT.get()


@dataclass
class RequestTiming:
    """One request's times (seconds, ``time.monotonic``) and sizes; see the module docstring.

    ``inputs``: how many inputs the body held (texts, pairs or documents; 1 for a single one), what TEI
    divides its per-input times by. ``method``: ``single`` or ``batch`` (TEI's ``te_request_count`` label).
    ``family``: ``embed`` or ``predict`` (TEI's ``te_embed_*`` / ``te_predict_*`` series), None for neither.
    """

    start: float = field(default_factory=time.monotonic)
    tokenization_s: float = 0.0
    compute_chars: int = 0
    inputs: int = 1
    method: str = "single"
    family: str | None = None
    jobs: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, *, inputs: int, batch: bool, chars: int, family: str | None = None) -> None:
        """What the route read: ``inputs`` (>= 1), whether the body was a list (``batch``), the characters
        of its texts (``chars``) and the TEI series family."""
        self.inputs, self.method, self.compute_chars = max(1, int(inputs)), "batch" if batch else "single", int(chars)
        self.family = family

    def add_tokenization(self, seconds: float) -> None:
        """Add ``seconds`` of tokeniser-thread work (called from that thread)."""
        with self._lock:
            self.tokenization_s += seconds

    @property
    def inference_s(self) -> float:
        """Seconds of the forwards that held this request's items (each forward once per job)."""
        return sum(getattr(job, "inference_s", 0.0) for job in self.jobs)

    @property
    def queue_s(self) -> float:
        """Seconds its jobs spent in the batcher (union of submit-to-finish intervals) not in a forward."""
        spans = sorted((job.submitted_at, job.finished_at if job.finished_at is not None else time.monotonic())
                       for job in self.jobs)
        total, end = 0.0, float("-inf")
        for a, b in spans:
            if b > end:
                total += b - max(a, end)
                end = b
        return max(0.0, total - self.inference_s)

    @property
    def compute_tokens(self) -> int:
        """Tokens of every item computed for the request (pairs, and texts and labels to embed)."""
        return sum(len(item.enc) for job in self.jobs for item in job.pairs)

    def elapsed(self) -> float:
        """Seconds since the request started."""
        return time.monotonic() - self.start


def note_request(inputs: int, *, batch: bool, chars: int, family: str | None = None) -> None:
    """`RequestTiming.note` on the current request's timing; nothing outside a timed route."""
    timing = current_timing()
    if timing is not None:
        timing.note(inputs=inputs, batch=batch, chars=chars, family=family)


def timing_headers(t: RequestTiming) -> list[tuple[bytes, bytes]]:
    """TEI's response headers of ``t`` (names lower-case, values whole milliseconds or counts); the
    tokenization, queue and inference times are per input (divided by ``t.inputs``), as TEI averages them."""
    total_ms = str(int(t.elapsed() * 1000))
    per = max(1, t.inputs)
    values = {"x-compute-time": total_ms, "x-compute-characters": str(t.compute_chars),
              "x-compute-tokens": str(t.compute_tokens), "x-total-time": total_ms,
              "x-tokenization-time": str(int(t.tokenization_s * 1000 / per)),
              "x-queue-time": str(int(t.queue_s * 1000 / per)),
              "x-inference-time": str(int(t.inference_s * 1000 / per))}
    return [(k.encode(), v.encode()) for k, v in values.items()]


#: ``observer(path, status, timing)``: called once per answered timed request.
TimingObserver = Callable[[str, int, RequestTiming], None]


class TimingMiddleware:
    """Pure ASGI middleware: a `RequestTiming` for each request to a `TIMED_PATHS` route, TEI's headers
    (`timing_headers`) on its 2xx answer, and ``observers`` told of every answer (status 499 when the client
    left before one). ``observers`` is read live, so the metrics extension may append to it later."""

    def __init__(self, app: Any, observers: list[TimingObserver]) -> None:
        self.app, self.observers = app, observers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") not in TIMED_PATHS:
            return await self.app(scope, receive, send)
        timing = RequestTiming()
        token = _CURRENT.set(timing)
        status: list[int] = []

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if 200 <= message["status"] < 300:
                    message = {**message, "headers": [*message.get("headers", []), *timing_headers(timing)]}
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            _CURRENT.reset(token)
            for observer in self.observers:
                try:
                    observer(scope["path"], status[0] if status else 499, timing)
                except Exception:  # noqa: BLE001 - telemetry never breaks an answer
                    import logging

                    logging.getLogger("zsnli").exception("timing observer %r failed", observer)


class TimedExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose work submitted for a timed request adds its run time to that request's
    `RequestTiming.tokenization_s` (the service's tokeniser pool: `zsnli.serving.lifecycle`)."""

    def submit(self, fn, /, *args, **kwargs):  # noqa: D102 - ThreadPoolExecutor.submit
        timing = current_timing()
        if timing is None:
            return super().submit(fn, *args, **kwargs)

        def timed():
            t0 = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                timing.add_tokenization(time.monotonic() - t0)

        return super().submit(timed)
