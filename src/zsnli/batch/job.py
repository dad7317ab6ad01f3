"""The checked description of one ``zsnli-batch`` run, shared by the CLI (`zsnli.batch.cli`) and
the Ray runner (`zsnli.batch.ray_runner`), and the one-line usage error.

May import: the standard library, `zsnli.batch.predictor` (ColumnSpec), `zsnli.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .predictor import ColumnSpec
from ..config import Settings


class UsageError(ValueError):
    """A flag or input mistake: one line, exit code 2."""


@dataclass(frozen=True)
class Job:
    """A checked command line: where to read and write, the columns, the service settings."""

    input: str
    output: str
    fmt: str
    spec: ColumnSpec
    settings: Settings
    actors: int | None
    cpus_per_actor: float
    batch_rows: int
    ray_address: str | None
    stall_timeout_s: float = 600.0
    ids: Any = None
    """The input's ids (a pyarrow array, read by `zsnli.batch.cli.check_ids`): what the output must hold."""


def is_url(path: str) -> bool:
    """True for a URL (``s3://...``), False for a local path."""
    return "://" in path
