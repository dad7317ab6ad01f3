"""The output of a ``zsnli-batch`` run: Parquet parts committed one at a time, and what they already hold.

The driver writes one part per scored batch as soon as it comes back (`write_part`), atomically: on a
local disk (or any filesystem with a rename) the part is written under a ``.``-prefixed temporary name,
fsynced, then renamed into place; on an object store (``s3://``, ``gs://``) the object is put under its
final name, which such stores publish whole or not at all. Readers (pyarrow, pandas, Spark) skip ``.``-
and ``_``-prefixed names, so they never see a part being written. A run stopped at any moment therefore
leaves only whole parts, and loses at most the batches in flight; a rerun reads the ids of the committed
parts (`committed_ids`, the id column only) and scores exactly the missing rows.

One writer per output: `lock_output` takes an exclusive ``fcntl.flock`` on ``<output>/_zsnli-batch.lock``
for the whole run, so a second run on the same ``--output`` is refused (`OutputLocked`) instead of
scoring every row again beside the first. The kernel drops the lock when the holding process ends, however
it ends, so a killed run's leftover lock file never blocks the next run. Object-store outputs
(``s3://``, ``gs://``) have no such lock: one run at a time is then the caller's to ensure.

Nothing here imports Ray: the CLI decides before Ray starts whether anything is missing.

May import: pyarrow, the standard library, `zsnli.batch.job`.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .job import is_url

#: Committed parts are named ``part-<run>-<seq>.parquet``; temporary ones start with this prefix.
TEMP_PREFIX = ".inflight-"
#: The lock file of a local output directory (``_``-prefixed: readers and `part_files` skip it).
LOCK_NAME = "_zsnli-batch.lock"
#: Filesystems whose writes are published whole on close (no rename needed, none cheap).
OBJECT_STORES = ("s3", "gcs")


def filesystem(output: str) -> tuple[pafs.FileSystem, str]:
    """``(pyarrow filesystem, path in it)`` of the output directory (a local path or a URL)."""
    if is_url(output):
        return pafs.FileSystem.from_uri(output)
    return pafs.LocalFileSystem(), str(Path(output).resolve())


def part_files(output: str) -> list[str]:
    """The committed Parquet parts under ``output`` (temporary and ``_``-prefixed names skipped: also the
    ``_checkpoint`` of outputs written before parts existed), sorted; empty when there is no output yet."""
    fs, root = filesystem(output)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    keep = []
    for info in infos:
        rel = info.path[len(root):].lstrip("/")
        if info.type == pafs.FileType.File and info.path.endswith(".parquet") \
                and not any(piece.startswith((".", "_")) for piece in rel.split("/")):
            keep.append(info.path)
    return sorted(keep)


def _dataset(output: str, files: list[str]) -> pads.Dataset:
    fs, _ = filesystem(output)
    return pads.dataset(files, format="parquet", filesystem=fs)


def committed_ids(output: str, id_col: str) -> pa.ChunkedArray | None:
    """The ids in the committed parts (the id column only), or None when there are none."""
    files = part_files(output)
    return _dataset(output, files).to_table(columns=[id_col]).column(id_col) if files else None


def output_counts(output: str, exclude: set[str] | frozenset[str] = frozenset()) -> tuple[int, int]:
    """``(rows, rows with an error)`` in the committed parts, less the files in ``exclude``."""
    files = [f for f in part_files(output) if f not in exclude]
    if not files:
        return 0, 0
    table = _dataset(output, files).to_table(columns=["error"])
    return table.num_rows, table.num_rows - table.column("error").null_count


def remove_temporaries(output: str) -> int:
    """Delete the temporary files a killed run left (``.inflight-*``); returns how many."""
    fs, root = filesystem(output)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    gone = 0
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name.startswith(TEMP_PREFIX):
            fs.delete_file(info.path)
            gone += 1
    return gone


class OutputLocked(Exception):
    """Another live process holds the lock of this output (the message is one line naming both)."""


class OutputLock:
    """An exclusive ``fcntl.flock`` on ``<output>/_zsnli-batch.lock`` (`LOCK_NAME`), held until `release` (or the process
    ends). ``path``: the lock file; ``None`` for an object-store output, which is not locked."""

    def __init__(self, path: str | None, handle) -> None:
        self.path, self._handle = path, handle

    def release(self) -> None:
        """Drop the lock (the file stays: an unlocked leftover is harmless). Idempotent."""
        if self._handle is not None:
            self._handle.close()  # closing the descriptor drops the flock
            self._handle = None

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output(output: str) -> OutputLock:
    """Create the local output directory if needed and lock it for this process (see the module docstring).
    Raises `OutputLocked` at once (no wait) when another live process holds it, naming the output, the
    lock file and the holder's pid; ``OSError`` when the directory or the lock file cannot be made."""
    if is_url(output):
        return OutputLock(None, None)
    root = Path(output).resolve()
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_NAME
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = " ".join(handle.read(200).split()) or "another process"
        handle.close()
        raise OutputLocked(f"--output {output} is in use by another zsnli-batch run ({holder}; lock {path}): "
                           "one run per output; wait for it to end, or use another --output") from None
    except OSError:
        handle.close()
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    handle.flush()
    return OutputLock(str(path), handle)


class PartWriter:
    """Writes the parts of one run: ``part-<run id>-<sequence>.parquet``, each committed atomically (see
    the module docstring). ``rows``, ``errors`` (rows with an error) and ``files`` count what this run
    committed."""

    def __init__(self, output: str) -> None:
        self.fs, self.root = filesystem(output)
        self.run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
        self.rows, self.errors, self.files, self._seq = 0, 0, [], 0
        self.fs.create_dir(self.root, recursive=True)

    def write(self, table: pa.Table) -> str | None:
        """Commit ``table`` as the next part (nothing for an empty table); returns its path."""
        if table.num_rows == 0:
            return None
        self._seq += 1
        name = f"part-{self.run_id}-{self._seq:06d}.parquet"
        final = f"{self.root}/{name}"
        if self.fs.type_name in OBJECT_STORES:
            pq.write_table(table, final, filesystem=self.fs)
        elif isinstance(self.fs, pafs.LocalFileSystem):
            temp = f"{self.root}/{TEMP_PREFIX}{name}"
            with open(temp, "wb") as handle:
                pq.write_table(table, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, final)
        else:
            temp = f"{self.root}/{TEMP_PREFIX}{name}"
            pq.write_table(table, temp, filesystem=self.fs)
            self.fs.move(temp, final)
        self.rows += table.num_rows
        if "error" in table.column_names:
            self.errors += table.num_rows - table.column("error").null_count
        self.files.append(final)
        return final
