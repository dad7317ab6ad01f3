"""Command-line pieces shared by the harness commands (validate.py, the benchmarks).

`UsageParser` is ``argparse.ArgumentParser`` whose usage errors are ONE line
(``prog: error: what is wrong``, exit 2) instead of the usage block plus the
error; `positive_int` and `non_negative_int` are argparse types naming what is
accepted; `heartbeat` keeps a long step from being silent (one line every
``every_s`` seconds while it runs). Imports nothing from zsnli.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, NoReturn, TextIO

USAGE_EXIT = 2


class UsageParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reports a usage mistake in one line on stderr and exits 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit 2."""
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(USAGE_EXIT)


def _int(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int(text, 1, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int(text, 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


HEARTBEAT_S = 10.0
"""Seconds between two `heartbeat` lines."""


@contextmanager
def heartbeat(desc: str, every_s: float = HEARTBEAT_S, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs, write ``  ... <desc>: still running, N s`` to ``stream`` (default stderr) every
    ``every_s`` seconds (a daemon thread; nothing is written for a block shorter than that), so a long
    step with no progress of its own (an arm in a child process, a server starting) is never silent."""
    done = threading.Event()
    out = stream if stream is not None else sys.stderr
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            out.write(f"  ... {desc}: still running, {time.monotonic() - t0:.0f} s\n")
            out.flush()

    thread = threading.Thread(target=beat, name="zsnli-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
