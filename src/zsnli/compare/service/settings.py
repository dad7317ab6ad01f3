"""Settings of the bake-off service, read from ``ZSNLI_BAKEOFF_*`` and ``ZSNLI_RECEIPT_KEY``.

Every limit has a default and a documented range; a value that does not
parse or is out of range raises `zsnli.config.SettingsError` with one line
naming the variable and what is accepted (the server then refuses to start,
exit 3). So does a path that can never work (`check_paths`: a receipt key that is
not a readable Ed25519 key, a store that is not a SQLite file, a folder that cannot be
written), checked before the server listens: otherwise every bake-off would get
503 + ``Retry-After``, the answer to a transient fault, for a permanent one.
Imports only the standard library (``sqlite3``), `zsnli.config`, `zsnli.manifest` (`runs_path`) and `zsnli.compare.receipts`
(the key's variable and default, and its reader).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping

from zsnli.compare.receipts import KEY_ENV, ReceiptError, Signer, default_key
from zsnli.config import SettingsError
from zsnli.harness.cli import file_in_the_way
from zsnli.manifest import RUNS_ENV, runs_path


def default_db() -> str:
    """The store when ``ZSNLI_BAKEOFF_DB`` is unset: ``runs/bakeoff/bakeoffs.sqlite3``, relative to the working
    directory, or under ``$ZSNLI_RUNS_DIR`` (`zsnli.manifest.runs_path`, read when the settings are)."""
    return runs_path("bakeoff", "bakeoffs.sqlite3")


#: field -> (environment variable, minimum, maximum); the ranges are the documented ones.
RANGES: dict[str, tuple[str, float, float]] = {
    "time_budget_s": ("ZSNLI_BAKEOFF_TIME_BUDGET_S", 5, 600),
    "max_examples": ("ZSNLI_BAKEOFF_MAX_EXAMPLES", 2, 500),
    "max_labels": ("ZSNLI_BAKEOFF_MAX_LABELS", 2, 50),
    "max_input_chars": ("ZSNLI_BAKEOFF_MAX_INPUT_CHARS", 16, 20000),
    "max_concurrent": ("ZSNLI_BAKEOFF_MAX_CONCURRENT", 1, 16),
}


#: Every variable this module reads (`zsnli.config.misspelt_settings` takes a near miss of one for a typo).
SETTING_NAMES = ("ZSNLI_BAKEOFF_DB", KEY_ENV, *(var for var, _, _ in RANGES.values()), "ZSNLI_BAKEOFF_MODELS")


@dataclass(frozen=True)
class BakeoffSettings:
    """Paths, limits and the time budget of the bake-off service.

    db_path: SQLite file of finished bake-offs (``ZSNLI_BAKEOFF_DB``, default ``runs/bakeoff/bakeoffs.sqlite3``
        relative to the server's working directory, or under ``$ZSNLI_RUNS_DIR``: `default_db`; the schema is
        created on first use).
    key_path: Ed25519 private key of the receipts (``ZSNLI_RECEIPT_KEY``, PEM/PKCS#8, default
        `zsnli.compare.receipts.default_key`; created with mode 0600 on first use when absent).
    time_budget_s: wall-clock seconds one bake-off may take; arms not finished by then are ``failed``.
    max_examples / max_labels / max_input_chars: request limits (422 beyond them); ``max_input_chars``
        applies to each example's input, each label description and the task description.
    max_concurrent: bake-offs running at once; one more gets 503 with Retry-After.
    models: challenger models registered by name (``ZSNLI_BAKEOFF_MODELS=name=DIR,name2=DIR2``), local
        NLI model directories only (never the hub).
    """

    db_path: str = field(default_factory=default_db)
    key_path: str = field(default_factory=default_key)
    time_budget_s: float = 120.0
    max_examples: int = 200
    max_labels: int = 20
    max_input_chars: int = 2000
    max_concurrent: int = 2
    models: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "BakeoffSettings":
        """Parse the variables (default ``os.environ``). Raises ``SettingsError`` (one line) on a bad value."""
        env = os.environ if env is None else env
        values: dict = {}
        if env.get("ZSNLI_BAKEOFF_DB", "").strip():
            values["db_path"] = env["ZSNLI_BAKEOFF_DB"].strip()
        if env.get(KEY_ENV, "").strip():
            values["key_path"] = env[KEY_ENV].strip()
        types = {f.name: type(f.default) for f in fields(cls)}
        for name, (var, low, high) in RANGES.items():
            raw = env.get(var)
            if raw is None or not raw.strip():
                continue
            try:
                value = types[name](raw.strip()) if types[name] is int else float(raw.strip())
            except ValueError:
                kind = "an integer" if types[name] is int else "a number"
                raise SettingsError(f"{var} must be {kind} in [{low:g}, {high:g}], got {raw!r}") from None
            if not low <= value <= high:
                raise SettingsError(f"{var} must be in [{low:g}, {high:g}], got {raw!r}")
            values[name] = value
        if env.get("ZSNLI_BAKEOFF_MODELS", "").strip():
            values["models"] = parse_models(env["ZSNLI_BAKEOFF_MODELS"])
        return cls(**values)


def parse_models(raw: str) -> tuple[tuple[str, str], ...]:
    """``"name=DIR,name2=DIR2"`` -> ``(("name", "DIR"), ...)``. Raises ``SettingsError`` on a malformed entry."""
    out = []
    for item in raw.split(","):
        name, sep, path = item.strip().partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SettingsError(f"ZSNLI_BAKEOFF_MODELS must be name=DIR[,name=DIR...], got {item.strip()!r}")
        out.append((name.strip(), path.strip()))
    return tuple(out)


def _folder_problem(path: Path, probe: bool) -> str | None:
    """Why the folder of ``path`` cannot take a new file, or None. probe: create the folder (as first use
    would) and a temporary file in it, the only test that also holds for root and read-only mounts; else
    only look (the nearest existing ancestor must be a writable directory), creating nothing. A file where a
    folder of the path goes is named as such either way (`zsnli.harness.cli.file_in_the_way`)."""
    folder = path.parent
    blocking = file_in_the_way(path)
    if blocking is not None:
        return f"{blocking} is a file, not a folder"
    if probe:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            return f"its folder {folder} cannot be written ({exc.strerror or exc})"
        return None
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"its folder {existing} is not writable"
    return None


def _db_problem(path: Path, probe: bool) -> str | None:
    """Why ``path`` can never be the bake-off store: a directory, a file that is not a SQLite database (or
    cannot be opened read-write), or a folder that cannot be written (SQLite's WAL files live beside it)."""
    if path.is_dir():
        return "is a directory, not a SQLite file"
    if path.exists():
        try:
            conn = sqlite3.connect(path.resolve().as_uri() + "?mode=rw", uri=True)
            try:
                conn.execute("PRAGMA schema_version").fetchone()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            return f"is not a SQLite database that can be opened for writing ({exc})"
    return _folder_problem(path, probe)


def _key_problem(path: Path, probe: bool) -> str | None:
    """Why ``path`` can never be the receipt key: a directory, an existing file that is not a readable
    unencrypted Ed25519 PEM key (checked only where ``cryptography`` is installed: without it bake-offs
    answer 503 naming the package), or, when absent, a folder where it cannot be created."""
    if path.is_dir():
        return "is a directory, not a PEM key file"
    if path.exists():
        try:
            import cryptography  # noqa: F401
        except ImportError:
            return None
        try:
            Signer(path).private_key()
        except ReceiptError as exc:
            return " ".join(str(exc).split()).removeprefix(f"receipt key {path}: ")
        return None
    return _folder_problem(path, probe)


def check_paths(bsettings: BakeoffSettings, env: Mapping[str, str] | None = None) -> list[str]:
    """Check the store (``ZSNLI_BAKEOFF_DB``) and the receipt key (``ZSNLI_RECEIPT_KEY``) before the server
    listens; returns warning lines, raises ``SettingsError`` (one line naming the variable) for a path that
    can never work.

    Refused: a ``ZSNLI_BAKEOFF_MODELS`` challenger whose directory is missing or holds no ``config.json``,
    an existing store that is a directory or not a SQLite database, an existing key that is a
    directory or not a readable Ed25519 key, and, for a variable that is set (``env``, default
    ``os.environ``), a folder that cannot be written (probed by creating it and a temporary file, as first use
    would); so is a default path under a ``ZSNLI_RUNS_DIR`` that is set (the error names ``ZSNLI_RUNS_DIR``).
    For a default path only looked at (nothing created): an unwritable folder is a warning line, since
    bake-offs may never be used (``/classify`` works without them).
    """
    env = os.environ if env is None else env
    for name, model_dir in bsettings.models:
        where = Path(model_dir)
        problem = ("not found" if not where.exists() else "is not a directory" if not where.is_dir()
                   else "has no config.json (not a model directory)" if not (where / "config.json").is_file() else None)
        if problem:
            raise SettingsError(f"ZSNLI_BAKEOFF_MODELS: challenger {name!r} at {model_dir} {problem}: its arm could "
                                "never run; point it at a local NLI model directory")
    out = []
    runs_dir = env.get(RUNS_ENV, "").strip()
    for var, path, check in (("ZSNLI_BAKEOFF_DB", bsettings.db_path, _db_problem),
                             (KEY_ENV, bsettings.key_path, _key_problem)):
        explicit = bool(env.get(var, "").strip())
        under_runs = not explicit and bool(runs_dir)  # the default, under a ZSNLI_RUNS_DIR that was set: probed
        problem = check(Path(path), explicit or under_runs)
        if problem is None:
            continue
        line = f"{var}={path} {problem}" if explicit else f"{var} (default {path}) {problem}"
        if under_runs:
            raise SettingsError(f"{RUNS_ENV}={runs_dir}: {line}: bake-offs could never run; point {RUNS_ENV} at a "
                                f"folder the server can create and write (or set {var})")
        existing = Path(path).exists()
        if explicit or existing:
            raise SettingsError(f"{line}: bake-offs could never run; point {var} at a usable path")
        out.append(f"{line}: bake-offs will answer 503 until it can be (set {var})")
    return out
