"""Settings of the bake-off service, read from ``ZSNLI_BAKEOFF_*`` and ``ZSNLI_RECEIPT_KEY``.

Every limit has a default and a documented range; a value that does not
parse or is out of range raises `zsnli.config.SettingsError` with one line
naming the variable and what is accepted (the server then refuses to start,
exit 3). Imports only `zsnli.config` and `zsnli.compare.receipts` (the key's variable and default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Mapping

from zsnli.compare.receipts import DEFAULT_KEY, KEY_ENV
from zsnli.config import SettingsError

DEFAULT_DB = "runs/bakeoff/bakeoffs.sqlite3"

#: field -> (environment variable, minimum, maximum); the ranges are the documented ones.
RANGES: dict[str, tuple[str, float, float]] = {
    "time_budget_s": ("ZSNLI_BAKEOFF_TIME_BUDGET_S", 5, 600),
    "max_examples": ("ZSNLI_BAKEOFF_MAX_EXAMPLES", 2, 500),
    "max_labels": ("ZSNLI_BAKEOFF_MAX_LABELS", 2, 50),
    "max_input_chars": ("ZSNLI_BAKEOFF_MAX_INPUT_CHARS", 16, 20000),
    "max_concurrent": ("ZSNLI_BAKEOFF_MAX_CONCURRENT", 1, 16),
}


@dataclass(frozen=True)
class BakeoffSettings:
    """Paths, limits and the time budget of the bake-off service.

    db_path: SQLite file of finished bake-offs (``ZSNLI_BAKEOFF_DB``, default ``runs/bakeoff/bakeoffs.sqlite3``
        relative to the server's working directory; the schema is created on first use).
    key_path: Ed25519 private key of the receipts (``ZSNLI_RECEIPT_KEY``, PEM/PKCS#8; created with mode
        0600 on first use when absent).
    time_budget_s: wall-clock seconds one bake-off may take; arms not finished by then are ``failed``.
    max_examples / max_labels / max_input_chars: request limits (422 beyond them); ``max_input_chars``
        applies to each example's input, each label description and the task description.
    max_concurrent: bake-offs running at once; one more gets 503 with Retry-After.
    models: challenger models registered by name (``ZSNLI_BAKEOFF_MODELS=name=DIR,name2=DIR2``), local
        NLI model directories only (never the hub).
    """

    db_path: str = DEFAULT_DB
    key_path: str = DEFAULT_KEY
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
                raise SettingsError(f"{var} must be a number in [{low:g}, {high:g}], got {raw!r}") from None
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
