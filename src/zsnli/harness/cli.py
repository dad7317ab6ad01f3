"""The one command-line parser of every zsnli entry point, its argparse types, and `heartbeat`.

`UsageParser` is ``argparse.ArgumentParser`` whose usage errors are ONE line
(``prog: error: what is wrong (see prog --help)``, exit 2) instead of the
usage block plus the error. Every command line builds its parser (and its
sub-commands' parsers) from it: ``train.py`` (`zsnli.train_cli`), ``train.py
select`` (`zsnli.selection.cli`), ``server.py`` (`zsnli.serve`), ``zsnli``
(`zsnli.cli`), ``zsnli-batch`` (`zsnli.batch.cli`), ``validate.py`` (self-check, ``compare``) and every
``python -m zsnli.bench*`` / ``python -m zsnli.selection.*`` module. A check
made after parsing that fails prints ``prog: error: ...`` the same way
(`usage_error`) and exits (or returns) 2.

`positive_int`, `non_negative_int`, `positive_float` and `non_negative_float`
are argparse types naming what is accepted; `heartbeat` keeps a long step
from being silent (one line every ``every_s`` seconds while it runs).
Imports nothing from zsnli (standard library only), so the server, the
training CLI and the batch CLI can use it at no cost.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, NoReturn, TextIO

USAGE_EXIT = 2


def usage_error(prog: str, message: str) -> int:
    """Write ``PROG: error: MESSAGE`` (one line: newlines in ``message`` become spaces) to stderr;
    returns `USAGE_EXIT` (2) for the caller to return or exit with."""
    sys.stderr.write(f"{prog}: error: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
    return USAGE_EXIT


class UsageParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reports a usage mistake in one line on stderr and exits 2.

    The parsers of sub-commands (``add_subparsers().add_parser``) are of this class too: argparse
    builds them with the parent's class.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit 2."""
        sys.exit(usage_error(self.prog, f"{message} (see {self.prog} --help)"))


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
