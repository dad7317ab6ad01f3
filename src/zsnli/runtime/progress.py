"""Progress for every long wait (calibration, evaluation, the CLI's files, bake-off arms, batch jobs):
what is done, how fast, how long is left; the one progress module of the project.

On a terminal a tqdm bar on stderr; otherwise (a log file, CI) one plain
log line at most every `LINE_INTERVAL_S` seconds plus one at the end, so
logs get neither silence nor carriage-return noise. `predict_logits` runs
a model's own offline ``predict_logits`` under such a progress report (the
model reports its planned and finished tokens through ``on_plan``); `encode_texts`
does the same for a sentence encoder's ``encode`` (through ``on_batch``).

May import tqdm; torch only through the model passed in.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

LINE_INTERVAL_S = 10.0
"""Seconds between plain progress lines when stderr is not a terminal: every wait longer than this gets
at least one line saying what is done and what is left."""


def duration_text(seconds: float) -> str:
    """A time left or taken as a person reads it: ``?`` (unknown), ``42 s``, ``12m05s``, ``1h04m``."""
    if not seconds == seconds or seconds == float("inf"):
        return "?"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_line(desc: str, done: int, total: int | None, unit: str | None, elapsed_s: float) -> str:
    """The plain progress line: ``"<desc>: done/total unit (pct), rate/s, ~eta s left, elapsed s"``
    (without a total: ``"<desc>: done unit, rate/s, elapsed s"``; without a unit, a wait with nothing to
    count: ``"<desc>: still waiting, elapsed s"``). The time left is the remaining units at the mean rate
    so far; ``?`` before the first unit is done."""
    if unit is None:
        return f"{desc}: still waiting, {elapsed_s:.0f} s elapsed"
    elapsed = max(elapsed_s, 1e-9)
    rate = done / elapsed
    if total is None:
        return f"{desc}: {done} {unit}, {rate:.1f}/s, {elapsed_s:.0f} s elapsed"
    left = f"~{duration_text((total - done) / rate)} left" if rate > 0 else "? left"
    return (f"{desc}: {done}/{total} {unit} ({100.0 * done / max(total, 1):.0f}%), {rate:.1f}/s, {left}, "
            f"{elapsed_s:.0f} s elapsed")


class StderrHandler(logging.StreamHandler):
    """A log handler writing to whatever ``sys.stderr`` is when a record is emitted, as Python's own last-resort
    handler does, not to the stream of the moment it was made: a command line or server set up twice in one
    process (tests, a notebook) whose stderr was swapped in between (and the old one closed) still prints,
    where a plain ``StreamHandler(sys.stderr)`` failed with "I/O operation on closed file"."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        logging.Handler.__init__(self, level)  # no stream of its own: `stream` reads sys.stderr

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def emit(text: str) -> None:
    """Write one progress line: an INFO record of this module's logger when logging would show it (a
    handler and the INFO level: the server's and the CLIs' logging), else straight to stderr, so a
    progress line is never swallowed by an unconfigured or quieter logging setup."""
    if log.hasHandlers() and log.isEnabledFor(logging.INFO):
        log.info("%s", text)
    else:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


class Reporter:
    """Counts units done of ``total`` (None: unknown) and reports them: a tqdm bar on stderr when it is
    a terminal, else a `format_line` INFO line at most every `LINE_INTERVAL_S` seconds, written by a
    daemon thread as well, so a wait with no unit finished (a slow first batch) is never silent; and
    one line at `close`. ``advance(n)`` and ``set_total(n)`` may be called from any thread."""

    def __init__(self, total: int | None, desc: str, unit: str = "pairs", terminal: bool | None = None,
                 read: Callable[[], int] | None = None) -> None:
        self.total, self.desc, self.unit, self.done, self.read = total, desc, unit, 0, read
        self._lock = threading.Lock()
        self._t0 = self._last = time.monotonic()
        self._stop = threading.Event()
        self._bar = None
        if sys.stderr.isatty() if terminal is None else terminal:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", unit_scale=True, dynamic_ncols=True)
        if self._bar is None or read is not None:
            threading.Thread(target=self._tick, name="zsnli-progress", daemon=True).start()

    def _poll(self) -> None:
        """Take ``read()``'s count (a counter another process advances) as the units done."""
        if self.read is None:
            return
        try:
            now = int(self.read())
        except Exception:  # noqa: BLE001 - progress is best effort
            return
        with self._lock:
            gained, self.done = now - self.done, now
        if self._bar is not None and gained > 0:
            self._bar.update(gained)

    def _tick(self) -> None:
        while not self._stop.wait(0.5 if self._bar is not None else max(0.05, min(LINE_INTERVAL_S / 2, 1.0))):
            self._poll()
            if self._bar is None and time.monotonic() - self._last >= LINE_INTERVAL_S:
                self.line()

    def line(self) -> None:
        """Log the current `format_line` now."""
        with self._lock:
            self._last = time.monotonic()
            text = format_line(self.desc, self.done, self.total, self.unit, self._last - self._t0)
        emit(text)

    def advance(self, n: int = 1) -> None:
        """``n`` more units done."""
        if self._bar is not None:
            self._bar.update(n)
            return
        with self._lock:
            self.done += n
            due = time.monotonic() - self._last >= LINE_INTERVAL_S
        if due:
            self.line()

    def set_total(self, total: int | None) -> None:
        """The total became known (or changed)."""
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def stop(self) -> None:
        """Stop the line thread, writing nothing more."""
        self._stop.set()

    def close(self) -> None:
        """Stop the line thread and write the final line (or close the bar)."""
        self._stop.set()
        self._poll()
        if self._bar is not None:
            self._bar.close()
        else:
            self.line()


@contextmanager
def progress(total: int | None, desc: str, unit: str = "pairs") -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``, reporting ``n`` more of ``total`` units done (``total`` None: unknown).

    tqdm when stderr is a terminal; otherwise an INFO log line (`format_line`:
    ``"<desc>: done/total unit (pct), rate/s, ~eta s left, elapsed"``) at most every
    `LINE_INTERVAL_S` seconds, at least that often while the block runs, and one when it ends.
    """
    reporter = Reporter(total, desc, unit)
    try:
        yield reporter.advance
    finally:
        reporter.close()


@contextmanager
def watch(read: Callable[[], int], total: int | None, desc: str, unit: str = "rows") -> Iterator[Reporter]:
    """Report a count that something else advances (a forked child through a `shared_counter`, a pool of
    requests): ``read()`` is polled, and reported as `progress` reports, lines at least every
    `LINE_INTERVAL_S` seconds with the time left."""
    reporter = Reporter(total, desc, unit, read=read)
    try:
        yield reporter
    finally:
        reporter.close()


def shared_counter():
    """A counter a forked child can advance and its parent read (``multiprocessing.Value``, lock-guarded):
    ``counter.value += n`` under ``with counter.get_lock()``, read as ``counter.value``."""
    import multiprocessing

    return multiprocessing.get_context("fork").Value("q", 0)


@contextmanager
def waiting(desc: str) -> Iterator[None]:
    """A wait with nothing to count (a server starting): a line ``<desc>: 0 ..., N s elapsed`` at least every
    `LINE_INTERVAL_S` seconds while the block runs (nothing for a shorter block), off a terminal and on one."""
    reporter = Reporter(None, desc, None, terminal=False)
    try:
        yield
    finally:
        reporter.stop()


def predict_logits(nli, premises: Sequence[str], hypotheses: Sequence[str], desc: str,
                   token_budget: int | None = None) -> np.ndarray:
    """``nli.predict_logits(premises, hypotheses)`` with progress: float32 ``[N, C]`` in input order.

    Progress is counted in tokens (pairs x their batch's longest length), so
    the remaining time is estimated fairly although the longest pairs run first;
    the model reports them through its ``on_plan`` hook
    (`zsnli.runtime.model.NliRuntime.predict_logits`), so the batches and logits are
    exactly those of a call without progress. Raises ``ValueError`` as
    ``predict_logits`` does.
    """
    with ExitStack() as stack:
        def on_plan(total_tokens: int):
            return stack.enter_context(progress(total_tokens, f"{desc} ({len(premises)} pairs)", unit="tokens"))

        return nli.predict_logits(premises, hypotheses, token_budget=token_budget, on_plan=on_plan)


def encode_texts(encoder, texts: Sequence[str], desc: str) -> np.ndarray:
    """``encoder.encode(texts)`` (a `zsnli.runtime.embedding.SentenceEncoder`) with progress counted in texts:
    float32 ``[N, D]`` in input order, the same vectors as a call without progress."""
    with progress(len(texts), f"{desc} ({len(texts)} texts)", unit="texts") as advance:
        return encoder.encode(texts, on_batch=advance)
