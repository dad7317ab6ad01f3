"""The one command-line parser of every zsnli entry point and its argparse types.

`UsageParser` is ``argparse.ArgumentParser`` whose usage errors are ONE line
(``prog: error: what is wrong (see prog --help)``, exit 2) instead of the
usage block plus the error. Every command line builds its parser (and its
sub-commands' parsers) from it: ``train.py`` (`zsnli.train_cli`), ``train.py
select`` (`zsnli.selection.cli`), ``server.py`` (`zsnli.serve`), ``zsnli``
(`zsnli.cli`), ``zsnli-batch`` (`zsnli.batch.cli`), ``validate.py`` (self-check, ``compare``) and every
``python -m zsnli.bench*`` / ``python -m zsnli.selection.*`` module. A check
made after parsing that fails prints ``prog: error: ...`` the same way
(`usage_error`) and exits (or returns) 2. Every entry point's ``main`` is wrapped by `one_line_errors`, so an
input nested deeper than Python can walk or a file that cannot be read or written is one line too.

`number_type` builds the argparse type of every numeric flag (a range, checked at parse
time, named in the one-line error); `positive_int`, `non_negative_int`, `positive_float`,
`non_negative_float`, `fraction`, `open_fraction`, `accuracy_target` and `port_number` are the
common ones (`tests/test_command_lines.py` fails on a bare ``type=int``/``type=float``). `plain_text` is a bench
command's description (its docstring's first paragraph without reST markup). `json_problem` says why a JSON file
did not parse (an empty one named as such); `encoding_problem`, why a JSONL file is not UTF-8 (UTF-16/32). `url_problem`
is every ``--url`` flag's check (``validate.py``, ``zsnli classify``): a URL without its scheme is named. (Progress
lines for long waits are `zsnli.runtime.progress`'s.)
Imports nothing from zsnli (standard library only), so the server, the
training CLI and the batch CLI can use it at no cost.
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

USAGE_EXIT = 2
#: Exit code after Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended.
INTERRUPTED_EXIT = 130


def url_problem(url: str) -> str | None:
    """What is wrong with a server URL given on a command line, in words, or None when it is an http:// or
    https:// URL with a host part: ``127.0.0.1:8000`` -> ``'127.0.0.1:8000' lacks a scheme: write
    http://127.0.0.1:8000``; ``ftp://x`` -> not an http:// or https:// URL."""
    if url.startswith(("http://", "https://")) and url.split("://", 1)[1]:
        return None
    if "://" not in url and url.strip():
        return f"{url!r} lacks a scheme: write http://{url}"
    return f"{url!r} is not an http:// or https:// URL"


def one_line_errors(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorator of a command line's ``main(argv) -> exit code``: what reaches it of ``RecursionError`` (a JSON
    input nested deeper than Python's recursion limit), ``MemoryError`` and ``OSError`` (a file missing,
    unreadable, or a full disk) is printed as ``prog: error: ...`` (one line, no traceback) and returns 2
    (an input or file problem; 1 for ``ENOSPC``/``EDQUOT``, a write that may succeed on a rerun). A Ctrl-C
    (``KeyboardInterrupt``) that reaches it is ``prog: interrupted (Ctrl-C)`` and `INTERRUPTED_EXIT` (130), not a
    traceback (every ``finally`` below has run; a command that can say more, such as what it wrote, catches it
    itself). Errors the command reports itself never get here; ``SystemExit`` passes through.

    While the command runs, `logging.raiseExceptions` is off (Python's logging documentation advises it in
    production): a log handler that fails (a closed stream, a full log disk, a third-party handler such as
    Ray Data's) drops its record instead of printing ``--- Logging error ---`` and a traceback to stderr; a CI
    run of ``zsnli-batch`` showed one above its one-line error."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def guarded(*args: Any, **kwargs: Any) -> int:
            before, logging.raiseExceptions = logging.raiseExceptions, False
            try:
                return main(*args, **kwargs)
            except RecursionError:
                print(f"{prog}: error: an input is nested too deeply to read (JSON nested past Python's "
                      f"recursion limit, {sys.getrecursionlimit()})", file=sys.stderr, flush=True)
                return 2
            except MemoryError:
                print(f"{prog}: error: out of memory reading the input", file=sys.stderr, flush=True)
                return 2
            except KeyboardInterrupt:
                print(f"{prog}: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
                return INTERRUPTED_EXIT
            except OSError as exc:
                where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
                print(f"{prog}: error: {where}{exc.strerror or one_line(exc)}", file=sys.stderr,
                      flush=True)
                return 1 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 2
            finally:
                logging.raiseExceptions = before

        return guarded

    return wrap


def plain_text(text: str) -> str:
    """``text`` (a docstring's paragraph) as ``--help`` shows it: reST inline markup dropped (```x``` -> ``x``,
    ``:role:`x``` -> ``x``, a named link's target left out) and the lines joined with single spaces (argparse
    wraps them again): ``"The ``python -m zsnli.bench`` command (`zsnli.bench.x`)."`` -> ``"The python -m
    zsnli.bench command (zsnli.bench.x)."``."""
    text = re.sub(r":[a-z]+:`([^`]*)`", r"\1", text)
    text = re.sub(r"`([^`<]*?)\s*<[^`>]*>`_", r"\1", text)
    return " ".join(text.replace("``", "").replace("`", "").split())


_LINE_BREAK = re.compile(r"[ \t]*(?:\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])\s*")
"""A line break (any that ``str.splitlines`` knows) with the blanks around it."""


def one_line(text: object) -> str:
    """``str(text)`` as one line of an error: each line break, with the blanks around it, becomes one space, and
    the ends are stripped; blanks inside a line are kept (a value ``'a  b'`` stays as given, not ``'a b'``)."""
    return _LINE_BREAK.sub(" ", str(text)).strip()


#: A UTF-8 byte-order mark: a reader of UTF-8 text skips it. Marks of the encodings that are not UTF-8 (UTF-32
#: first: its little-endian mark starts with UTF-16's) are named by `encoding_problem`.
UTF8_BOM = b"\xef\xbb\xbf"
_FOREIGN_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
                 (b"\xfe\xff", "UTF-16"))


def encoding_problem(head: bytes) -> str | None:
    """Why a JSONL file whose first bytes are ``head`` is not UTF-8, to follow its name (``f"{path} {problem}"``),
    with the iconv command that converts it; None when it may be UTF-8 (a UTF-8 BOM is fine). A UTF-16/32
    byte-order mark names that encoding; NUL bytes in the first line are UTF-16 without a mark."""
    for bom, name in _FOREIGN_BOMS:
        if head.startswith(bom):
            return f"is {name} (its byte-order mark says so): JSONL is UTF-8; convert it, e.g. iconv -f {name} -t UTF-8"
    if b"\x00" in head.split(b"\n", 1)[0]:
        return ("holds NUL bytes in its first line (UTF-16 without a byte-order mark?): JSONL is UTF-8; convert it, "
                "e.g. iconv -f UTF-16 -t UTF-8")
    return None


def json_type(value: Any) -> str:
    """A JSON value's type in words, for a refusal: ``an object``, ``a list``, ``a string``, ``a boolean``, ``a number``,
    ``null`` (another Python type by its name)."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def not_utf8_place(data: bytes, exc: UnicodeDecodeError) -> str:
    """Where the first byte of ``data`` (a JSONL file's bytes, those ``exc`` was raised on) that is not UTF-8 sits,
    for an error line: ``byte 0xe9 on line 3 (byte 12 of the line)``; lines are counted at ``\\n``."""
    start = exc.start
    line, column = data.count(b"\n", 0, start) + 1, start - data.rfind(b"\n", 0, start)
    return f"byte 0x{data[start]:02x} on line {line} (byte {column} of the line)"


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split at ``\\n`` only (a U+2028 inside a string stays in it), each without its line
    end (``\\r`` too: CRLF files), so that a JSON error on a line is about the line alone: an unterminated string
    is "Unterminated string", not "Invalid control character" at its newline."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def json_syntax(exc: Any, column: bool = True) -> str:
    """A ``json.JSONDecodeError`` in words: its message then where, ``Unterminated string (line 1, column 10)``.
    ``json``'s messages that end in ``at`` (``Unterminated string starting at``, ``Invalid control character at``)
    expect the position right after them; written "... at at line 1" by a caller that adds its own, they are
    trimmed here. ``column``: False for one line of a JSONL file (the caller names the line): ``(column 10)``."""
    msg = re.sub(r"\s+(starting\s+)?at$", "", str(exc.msg))
    return f"{msg} (line {exc.lineno}, column {exc.colno})" if column else f"{msg} (column {exc.colno})"


def json_problem(exc: BaseException) -> str:
    """Why a JSON file could not be read, for a one-line error: ``empty file`` when the document is empty or blank
    (``json``'s own "Expecting value: line 1 column 1 (char 0)" says nothing of that), else the error's text
    (`one_line`). ``exc``: what ``json.loads``/``json.load`` raised (a ``json.JSONDecodeError`` carries the document
    it was given as ``doc``), or any other error of reading the file."""
    doc = getattr(exc, "doc", None)
    if isinstance(doc, (str, bytes)) and not doc.strip():
        return "empty file"
    return json_syntax(exc) if hasattr(exc, "msg") and hasattr(exc, "colno") else one_line(exc)


def usage_error(prog: str, message: str) -> int:
    """Write ``PROG: error: MESSAGE`` (one line, `one_line`) to stderr; returns `USAGE_EXIT` (2) for the caller to
    return or exit with."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    sys.stderr.flush()
    return USAGE_EXIT


def unknown_command(prog: str, word: str, commands: tuple[str, ...], default: str) -> int:
    """Refuse ``PROG WORD ...`` where ``WORD`` (a first argument that is no option) is none of ``commands``: one
    line on stderr (`usage_error`) naming it, the closest command when one is close (`difflib`'s default cutoff
    0.6) and every command, then ``default`` (what no command runs); returns `USAGE_EXIT` (2)."""
    import difflib

    close = difflib.get_close_matches(word, list(commands), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return usage_error(prog, f"unknown command {word!r}; {hint}the commands are {', '.join(commands)} ({default})")


class UsageParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reports a usage mistake in one line on stderr and exits 2.

    The parsers of sub-commands (``add_subparsers().add_parser``) are of this class too: argparse
    builds them with the parent's class. A negative number in exponent form (``--lr -1e-5``) or ``-inf`` is
    read as a value, as ``-3`` and ``-0.5`` are (argparse took it for an option: "expected one argument"), so the
    flag's own type names what it accepts.
    """

    #: argparse's own pattern (``-3``, ``-.5``) widened to exponents (``-1e-5``, ``-2.5E+3``) and ``-inf``.
    NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit 2 (the flag named once: `undoubled`)."""
        sys.exit(usage_error(self.prog, f"{undoubled(message)} (see {self.prog} --help)"))


def undoubled(message: str) -> str:
    """argparse's ``argument --flag: <the type's message>`` with the flag named once: a type whose own message starts
    with the flag (``argument --premise-windows: --premise-windows expects ...``) loses that repeat (``argument
    --premise-windows: expects ...``); any other message is returned as it is."""
    found = re.match(r"argument (\S+): (\S+?)(?::? )", message)
    if found and found.group(2) in found.group(1).split("/"):
        return f"argument {found.group(1)}: {message[found.end():]}"
    return message


def bound_text(value: float) -> str:
    """A range's bound as a reader writes it: a whole number as a plain integer (``604800000``, not ``%g``'s
    ``6.048e+08``, up to 1e15, exact in a float), anything else as ``%g`` (``0.5``, ``1e-06``, ``1e+300``)."""
    if math.isfinite(value) and value == int(value) and abs(value) <= 1e15:
        return str(int(value))
    return f"{value:g}"


def _range_text(kind: type, low: float, high: float, low_open: bool, high_open: bool) -> str:
    noun = "an integer" if kind is int else "a number"
    if high == float("inf"):
        return f"{noun} {'>' if low_open else '>='} {bound_text(low)}"
    return f"{noun} in {'(' if low_open else '['}{bound_text(low)}, {bound_text(high)}{')' if high_open else ']'}"


def number_type(kind: type, low: float, high: float = float("inf"), *, low_open: bool = False,
                high_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: ``kind`` (``int`` or ``float``) in the range given, finite.

    ``low``/``high`` are the bounds (``high`` inf: no upper bound); ``low_open``/``high_open``
    exclude them. A value outside, NaN, inf or text that is not a number raises
    ``argparse.ArgumentTypeError`` ``expected <range>, got <text>``, which `UsageParser`
    prints as one line naming the flag. The returned function's ``__name__`` is the
    range in words (argparse shows it in ``invalid ... value`` messages).
    """
    what = _range_text(kind, low, high, low_open, high_open)

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        inside = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not inside or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    parse.__name__ = what
    return parse


positive_int = number_type(int, 1)
"""argparse type: an integer >= 1."""

non_negative_int = number_type(int, 0)
"""argparse type: an integer >= 0 (seeds, counts that may be zero)."""

positive_float = number_type(float, 0, low_open=True)
"""argparse type: a finite number > 0 (seconds, rates, sizes)."""

non_negative_float = number_type(float, 0)
"""argparse type: a finite number >= 0."""

fraction = number_type(float, 0, 1, high_open=True)
"""argparse type: a number in [0, 1) (a warm-up ratio)."""

open_fraction = number_type(float, 0, 1, low_open=True, high_open=True)
"""argparse type: a number in (0, 1) (a train share of a split)."""

accuracy_target = number_type(float, 0, 1, low_open=True)
"""argparse type: an accuracy to reach, a number in (0, 1]."""

port_number = number_type(int, 0, 65535)
"""argparse type: a TCP port, 0 (any free one) to 65535."""

MAX_WAIT_S = 7 * 24 * 3600
"""The largest seconds-valued flag (a time budget, a timeout, a phase length): one week. Waits with a timeout
(``select``/``poll``, ``multiprocessing`` pipes) hold it as a C int of milliseconds, which overflows past
2**31 ms (about 24.8 days: ``OverflowError: timeout is too large``); a week is above any run of these commands."""

positive_seconds = number_type(float, 0, MAX_WAIT_S, low_open=True)
"""argparse type: seconds in (0, `MAX_WAIT_S`] (time budgets, timeouts, phase lengths)."""

non_negative_seconds = number_type(float, 0, MAX_WAIT_S)
"""argparse type: seconds in [0, `MAX_WAIT_S`] (0 meaning none, e.g. a fit-time ceiling)."""

positive_ms = number_type(float, 0, MAX_WAIT_S * 1000, low_open=True)
"""argparse type: milliseconds in (0, `MAX_WAIT_S` x 1000] (a latency ceiling)."""


def path_type(text: str) -> Path:
    """argparse type of a path flag or argument: the path; an empty (or blank) value is refused in one line naming
    the flag (``Path('')`` is the current folder, so ``--model-dir ''`` passed for ``.``; a new-user pass)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty value; give a path")
    return Path(text)


path_type.__name__ = "path"


def path_text(text: str) -> str:
    """`path_type` for a command that keeps its paths as text: the text as given; an empty value is refused."""
    path_type(text)
    return text


path_text.__name__ = "path"


def file_in_the_way(path: str | Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a folder (a file where a folder of the path goes,
    which ``mkdir`` calls "File exists" and ``open`` "Not a directory"), else None."""
    existing = next((p for p in Path(path).parents if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


def output_file_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at ``path`` (one line, no flag name), or None when it can: not a directory,
    its folder creatable and writable. Tried by creating the folders and opening the file for appending, which
    leaves an existing file as it is; a file (and folders) this check made are removed again, so the writer
    must make the folders itself (`zsnli.bench.reports.write_report` does)."""
    path = Path(path)
    if path.is_dir():
        return f"{path}: is a directory; give a file path"
    blocking = file_in_the_way(path)
    if blocking is not None:
        return f"{path}: {blocking} is a file, not a folder"
    existed, made = path.exists(), [p for p in reversed(path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"{path}: cannot be written ({exc.strerror or exc})"
    if not existed:
        path.unlink()
        for folder in reversed(made):
            folder.rmdir()
    return None


def output_file(text: str) -> Path:
    """argparse type for an output file flag (``--out``, ``--json``, ``--report``, ``--html``): the path, checked
    with `output_file_problem` before the command's run starts; a path that cannot be written raises
    ``argparse.ArgumentTypeError``, which `UsageParser` prints as one line naming the flag (exit 2)."""
    problem = output_file_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


output_file.__name__ = "output file"
