"""How ``train.py`` reports a usage mistake: `TrainParser` (its parser, and so every sub-command's) and `usage_line`.

`zsnli.harness.cli.UsageParser` already makes each argparse error one line. Two things are ``train.py``'s own:

* an option a sub-command does not know (``train.py install-encoder RUN --bogus``) is named under that
  sub-command, ``train.py install-encoder: error: unrecognized arguments: --bogus (see train.py install-encoder
  --help)``: argparse hands a sub-command's unknown options up to the top parser, which would name ``train.py``
  and its own ``--help``, where the option is not explained either (`TrainParser.parse_args`);
* a value is echoed as it was given: `usage_line` turns line breaks into spaces (one line) but keeps every other
  character, so ``--base-note '   '`` is written back with its three spaces (a reader could not otherwise tell a
  blank value from a one-space one).

May import `zsnli.harness.cli` (standard library only).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import NoReturn, Sequence

from ..harness.cli import USAGE_EXIT, UsageParser, undoubled


def usage_line(prog: str, message: str) -> int:
    """Write ``PROG: error: MESSAGE`` on one line to stderr (each line break of ``message``, with the spaces around
    it, becomes one space; spaces inside a line are kept, so a quoted value reads as given). Returns the exit
    status of a usage mistake, 2 (`zsnli.harness.cli.USAGE_EXIT`)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    sys.stderr.write(f"{prog}: error: {text}\n")
    sys.stderr.flush()
    return USAGE_EXIT


class TrainParser(UsageParser):
    """``train.py``'s parser (its sub-commands' parsers are of this class too: argparse builds them with the
    parent's): one line per mistake, `usage_line`, exit 2; an unknown option is named under the sub-command
    it was given to."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` (`usage_line`; the flag named once,
        `zsnli.harness.cli.undoubled`) and exit 2."""
        sys.exit(usage_line(self.prog, f"{undoubled(message)} (see {self.prog} --help)"))

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """`argparse.ArgumentParser.parse_args`, except that arguments no parser knows exit 2 with one line
        under the sub-command given (``namespace.command``; the program alone without one), pointing at that
        sub-command's ``--help``; the arguments are quoted as a shell would need them (an empty one as '')."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            sys.exit(usage_line(prog, f"unrecognized arguments: {shlex.join(extras)} (see {prog} --help)"))
        return parsed
