"""Graceful shutdown: count the requests in flight and answer them before the drain deadline.

`Drain` is started by SIGTERM/SIGINT (``zsnli.serve`` calls ``request``
from its signal handler). From then on the service admits no new work;
requests already in flight run on, and those still unanswered shortly
before ``ZSNLI_DRAIN_TIMEOUT_S`` (when uvicorn would cancel them) are
cancelled (their queued pairs dropped) and answered 503 ``unavailable``.

May import: `zsnli.errors` and asyncio. Used by `zsnli.serving.service`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from ..errors import ApiError, ErrorType

logger = logging.getLogger("zsnli")


class Drain:
    """Shutdown bookkeeping: ``draining``, requests ``inflight``, how many were ``cut_off``.

    timeout_s: ``ZSNLI_DRAIN_TIMEOUT_S`` (0: no deadline, in-flight requests run to the end).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.draining = False
        self.inflight = 0
        self.cut_off = 0
        self.cutoff = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None  # set by the service at start

    def begin(self) -> None:
        """Shutdown began: admit no new work; set the deadline ``timeout - min(1 s, timeout / 4)``."""
        if self.draining:
            return
        self.draining = True
        logger.info("draining: %d request(s) in flight, no new work admitted", self.inflight)
        if self.timeout_s > 0:  # 0: uvicorn waits for in-flight requests without a limit
            cutoff = max(0.0, self.timeout_s - min(1.0, self.timeout_s / 4))
            asyncio.get_running_loop().call_later(cutoff, self._cut_off)

    def _cut_off(self) -> None:
        if self.inflight:
            logger.warning("drain deadline: answering %d in-flight request(s) with 503", self.inflight)
        self.cutoff.set()

    def request(self) -> None:
        """Thread- and signal-safe ``begin`` (scheduled on the service's event loop)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.begin)

    async def run(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``work()`` counted in flight; at the drain deadline cancel it and raise ``ApiError`` 503."""
        self.inflight += 1
        task = asyncio.ensure_future(work())
        cut = asyncio.ensure_future(self.cutoff.wait())
        try:
            done, _ = await asyncio.wait({task, cut}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            try:
                return await task  # finished after all (cancel came too late)
            except asyncio.CancelledError:
                pass
            self.cut_off += 1
            raise ApiError(ErrorType.UNAVAILABLE, "server shutting down: not answered before the drain deadline; retry")
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            cut.cancel()
            self.inflight -= 1
