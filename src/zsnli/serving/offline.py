"""Blocking, HTTP-free use of the service for batch jobs (a Ray actor, a script).

`OfflineClassifier` runs a `zsnli.serving.service.ZeroShotClassifier` on its own
event loop in a background thread, loads once, and answers blocking
``classify_many`` calls (pairs batched across the documents of a call);
`classify_documents` is the one-shot form.

May import: `zsnli.config`, `zsnli.serving.service`, `zsnli.serving.startup`.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Mapping, Sequence

from ..config import Settings
from .service import ZeroShotClassifier
from .startup import STARTUP_ERRORS, ModelLoader, StartupRefused, configure_logging, one_line, preflight


class OfflineClassifier:
    """``with OfflineClassifier(settings) as clf: clf.classify_many(docs)``; loads on enter, stops on exit.

    settings: default ``Settings.from_env()``. A failed load raises ``RuntimeError`` from ``__enter__``
    (the process is never signalled); a refused start-up raises ``zsnli.serving.startup.StartupRefused``.
    """

    def __init__(self, settings: Settings | None = None, loader: ModelLoader | None = None,
                 ready_timeout_s: float | None = None) -> None:
        self.service = ZeroShotClassifier(settings or Settings.from_env(), loader, shutdown_hook=lambda: None)
        self.ready_timeout_s = ready_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="zsnli-offline", daemon=True)

    def _call(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> "OfflineClassifier":
        configure_logging(self.service.settings.log_level)
        try:  # the checks first, as `zsnli.serve` runs them: a refusal is raised once, never also logged
            self.service.preflighted = preflight(self.service.settings)
        except STARTUP_ERRORS as exc:
            raise StartupRefused(one_line(exc)) from None
        self._thread.start()
        try:
            self._call(self.service.start())
            self._call(self.service.wait_ready(self.ready_timeout_s))
        except BaseException:
            self.close()
            raise
        return self

    def classify_many(self, docs: Sequence[Mapping[str, Any]], concurrency: int = 64) -> list[Any]:
        """Blocking `ZeroShotClassifier.classify_many`: per document its probabilities or its ``ApiError``."""
        return self._call(self.service.classify_many(docs, concurrency))

    def close(self) -> None:
        """Stop the service and its event loop (idempotent)."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            self._call(self.service.stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    def __exit__(self, *exc) -> None:
        self.close()


def classify_documents(docs: Sequence[Mapping[str, Any]], settings: Settings | None = None,
                       loader: ModelLoader | None = None, concurrency: int = 64) -> list[Any]:
    """Load, ``classify_many(docs)``, stop: one entry per document (probabilities or ``ApiError``)."""
    with OfflineClassifier(settings, loader) as clf:
        return clf.classify_many(docs, concurrency)
