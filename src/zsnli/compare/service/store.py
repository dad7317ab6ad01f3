"""SQLite store of finished bake-offs (``ZSNLI_BAKEOFF_DB``).

Schema (created on first use, idempotent)::

    bakeoffs(id TEXT PRIMARY KEY, created_at TEXT, winner TEXT, n INTEGER, retained INTEGER,
             receipt_sha256 TEXT, answer TEXT)             -- the full JSON answer
    bakeoff_examples(bakeoff_id TEXT, idx INTEGER, sha256 TEXT, input TEXT, expected TEXT,
                     PRIMARY KEY (bakeoff_id, idx))        -- input/expected NULL unless retained

WAL journal, ``synchronous=FULL``, a busy timeout (the first-use initialisation also retried on
SQLITE_BUSY, see `_initialise`), one connection per call (safe from any thread or process) and one
``BEGIN IMMEDIATE`` transaction per bake-off: a writer killed mid-write leaves the bake-off either
complete or absent. Example texts are stored only when the request set ``retain``;
otherwise only their sha256. Nothing here is read or written by ``/classify``.
Imports only the standard library.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bakeoffs (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    winner TEXT,
    n INTEGER NOT NULL,
    retained INTEGER NOT NULL,
    receipt_sha256 TEXT NOT NULL,
    answer TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS bakeoffs_created ON bakeoffs (created_at);
CREATE TABLE IF NOT EXISTS bakeoff_examples (
    bakeoff_id TEXT NOT NULL REFERENCES bakeoffs (id),
    idx INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    input TEXT,
    expected TEXT,
    PRIMARY KEY (bakeoff_id, idx)
);
"""


#: SQLite's primary result codes for another connection's lock (https://www.sqlite.org/rescode.html).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLITE_BUSY or SQLITE_LOCKED (extended codes included): another connection's lock.
    Python 3.11+ carries the code (``sqlite_errorcode``); 3.10 only the message, which names it."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return any(m in str(exc) for m in ("database is locked", "database table is locked", "database is busy"))


def _initialise(path: Path) -> None:
    """Create ``path`` if absent, switch it to WAL and create the schema; safe while other connections
    (threads or processes) initialise or write the same file.

    SQLite answers SQLITE_BUSY at once, without waiting out the busy timeout, where waiting could deadlock:
    two connections on a fresh file both switching it to WAL, or a schema read upgraded to a write after
    another connection wrote (https://www.sqlite.org/rescode.html#busy, https://www.sqlite.org/wal.html).
    So the schema is written inside ``BEGIN IMMEDIATE`` (the write lock is taken, waiting, before anything
    is read) and the whole step is retried on SQLITE_BUSY/SQLITE_LOCKED until ``BUSY_TIMEOUT_S`` has passed.
    Raises ``sqlite3.Error`` (the last one) after that, ``OSError`` where the folder cannot be created.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        conn = sqlite3.connect(path, timeout=max(0.0, deadline - time.monotonic()), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() + pause > deadline:
                raise
        finally:
            conn.close()
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


class Store:
    """The bake-off store at ``path`` (parent directories are created on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._ready = False
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if not self._ready:
                _initialise(self.path)
                self._ready = True
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def check_writable(self) -> None:
        """Take and release the write lock (``BEGIN IMMEDIATE``, ``ROLLBACK``): what `save` needs, checked before a
        bake-off runs so that a store that cannot be written fails the request at once instead of after every arm.
        Raises ``sqlite3.Error`` or ``OSError``."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    def save(self, answer: dict[str, Any], example_hashes: Sequence[str],
             examples: Sequence[tuple[str, str]] | None) -> None:
        """Write one bake-off in one transaction.

        answer: the JSON answer (``id``, ``created_at``, ``winner``, ``n``, ``receipt.sha256``);
        example_hashes: sha256 per example; examples: ``(input, expected)`` per example, only when retained.
        Raises ``sqlite3.Error`` (nothing is written then).
        """
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO bakeoffs VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (answer["id"], answer["created_at"], answer["winner"], answer["n"],
                              int(examples is not None), answer["receipt"]["sha256"],
                              json.dumps(answer, separators=(",", ":"), allow_nan=False)))
                rows = [(answer["id"], i, h, *(examples[i] if examples is not None else (None, None)))
                        for i, h in enumerate(example_hashes)]
                conn.executemany("INSERT INTO bakeoff_examples VALUES (?, ?, ?, ?, ?)", rows)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def get(self, bakeoff_id: str) -> dict[str, Any] | None:
        """The stored answer, or None for an unknown id."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT answer FROM bakeoffs WHERE id = ?", (bakeoff_id,)).fetchone()
        finally:
            conn.close()
        return json.loads(row[0]) if row else None

    def latest(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest bake-offs: ``[{"id", "created_at", "winner", "n", "task_description", "arms_run"}]``, newest
        first; ``arms_run`` is ``"F of R arms"`` (the arms that finished of those requested; None for an answer
        stored before it was recorded)."""
        conn = self._connect()
        try:
            rows = conn.execute("SELECT id, created_at, winner, n, json_extract(answer, '$.task_description'), "
                                "json_extract(answer, '$.arms_run.finished'), json_extract(answer, '$.arms_run.requested') "
                                "FROM bakeoffs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)).fetchall()
        finally:
            conn.close()
        return [{"id": r[0], "created_at": r[1], "winner": r[2], "n": r[3], "task_description": r[4],
                 "arms_run": f"{r[5]} of {r[6]} arms" if r[6] is not None else None} for r in rows]

    def example_rows(self, bakeoff_id: str) -> list[tuple[int, str, str | None, str | None]]:
        """``(idx, sha256, input, expected)`` of a bake-off's examples (input/expected None unless retained)."""
        conn = self._connect()
        try:
            return conn.execute("SELECT idx, sha256, input, expected FROM bakeoff_examples WHERE bakeoff_id = ? "
                                "ORDER BY idx", (bakeoff_id,)).fetchall()
        finally:
            conn.close()
