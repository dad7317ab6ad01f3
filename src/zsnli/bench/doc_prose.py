"""The figures of README.md and docs/ that sit in prose, outside every generated block: held by a ledger so that
none changes unseen (`zsnli.bench.doc_figures` runs the check first).

A *figure* is a decimal number (`FIGURE`: ``67.2``, ``9.58``, ``2.07`` of ``2.07x``, ``0.610``; not a version or an
address like ``0.1.0`` or ``127.0.0.1``, not an integer). Every figure of a page is either

* inside a ``<!-- figures:NAME -->`` block, which ``python -m zsnli.bench.doc_figures --write`` regenerates;
* inside a ``<!-- measured: COMMAND -->`` ... ``<!-- /measured -->`` block, whose opening line says how the
  figures in it are reproduced (the command; the page says on what machine and load): they are measurements
  of a machine, not of the committed model, and may change with a rerun of that command;
* or recorded in `LEDGER` (``docs/prose_figures.json``: per page, each figure and how often it appears).

`prose_changes` compares the pages with the ledger: a figure outside both kinds of block that is new, gone or
changed fails the check. That is what lets a stale paragraph be seen: a number a reader cannot reproduce
cannot change (or go stale when the model changes and someone edits it) without the diff saying so. To
change one, put it in a block that says how to reproduce it; a figure that depends on nothing measured (a
default, a constant) is recorded with ``python -m zsnli.bench.doc_figures --record-prose``, a change a
reviewer sees in the ledger's diff.

May import: the standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

#: A decimal figure: digits, a point, digits, not part of a dotted version or address, not inside a word.
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![.\d])")
#: The ledger of prose figures, relative to the repository root.
LEDGER = "docs/prose_figures.json"
GENERATED = re.compile(r"<!-- figures:(?P<name>[a-z0-9-]+) -->\n.*?<!-- /figures:(?P=name) -->", re.S)
MEASURED = re.compile(r"<!-- measured:(?P<how>[^\n]*?)-->\n.*?<!-- /measured -->", re.S)


class ProseError(ValueError):
    """A page's block is malformed (a ``measured`` block that does not say how it was measured)."""


def prose(text: str, where: str = "page") -> str:
    """``text`` without its ``figures:`` and ``measured`` blocks. Raises `ProseError` naming ``where`` for a
    ``measured`` block with no command on its opening line."""
    for m in MEASURED.finditer(text):
        if not m["how"].strip():
            raise ProseError(f"{where}: a <!-- measured: --> block must say how its figures are reproduced "
                             "(<!-- measured: COMMAND -->)")
    return MEASURED.sub("", GENERATED.sub("", text))


def page_figures(text: str, where: str = "page") -> dict[str, int]:
    """``{figure: count}`` of the decimal figures of ``text``'s prose (`prose`), sorted by figure."""
    return dict(sorted(Counter(FIGURE.findall(prose(text, where))).items()))


def current(root: Path, pages: list[Path]) -> dict[str, dict[str, int]]:
    """`page_figures` of each page (``pages``: absolute paths under ``root``), keyed by its relative path."""
    return {str(p.relative_to(root)): page_figures(p.read_text(encoding="utf-8"), str(p.relative_to(root)))
            for p in pages}


def recorded(root: Path) -> dict[str, dict[str, int]]:
    """The ledger (`LEDGER`) under ``root``; empty when there is none."""
    path = root / LEDGER
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def record(root: Path, pages: list[Path]) -> Path:
    """Write the ledger of ``pages`` as they are now; returns its path."""
    path = root / LEDGER
    path.write_text(json.dumps(current(root, pages), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def prose_changes(root: Path, pages: list[Path]) -> list[str]:
    """One line per page whose prose figures differ from the ledger: the figures that are new or more often
    there, and those gone or less often there (``docs/quality.md: new 90.2; gone 67.2``). Empty: all held."""
    before, now = recorded(root), current(root, pages)
    out = []
    for page in sorted(set(before) | set(now)):
        old, new = Counter(before.get(page, {})), Counter(now.get(page, {}))
        added, gone = sorted((new - old).elements()), sorted((old - new).elements())
        if added or gone:
            parts = ([f"new {' '.join(added)}"] if added else []) + ([f"gone {' '.join(gone)}"] if gone else [])
            out.append(f"{page}: {'; '.join(parts)}")
    return out


def held(root: Path, pages: list[Path], write: bool = False) -> bool:
    """The prose figures' check that ``python -m zsnli.bench.doc_figures`` runs before any block is rebuilt: False
    (the pages and figures named on stderr) when a figure outside every block of ``pages`` is new, gone or changed
    (`prose_changes`), or a ``measured`` block is malformed (one line); with ``write``, `record` writes the ledger
    instead (True)."""
    try:
        if write:
            print(f"recorded: {record(root, pages).relative_to(root)}", file=sys.stderr)
            return True
        changes = prose_changes(root, pages)
    except ProseError as exc:
        print(f"doc_figures: {exc}", file=sys.stderr)
        return False
    if changes:
        print("doc_figures: figures outside every block changed (" + "; ".join(changes) + "): put each in a "
              "<!-- measured: COMMAND --> block that says how to reproduce it, or a figures: block that "
              f"regenerates it; one that depends on nothing measured: --record-prose ({LEDGER})", file=sys.stderr)
        return False
    return True
