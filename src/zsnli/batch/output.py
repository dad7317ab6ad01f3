"""The output of a ``zsnli-batch`` run: Parquet parts committed one at a time, and what they already hold.

The driver writes one part per scored batch as soon as it comes back (`write_part`), atomically: on a
local disk (or any filesystem with a rename) the part is written under a ``.``-prefixed temporary name,
fsynced, then renamed into place; on an object store (``s3://``, ``gs://``) the object is put under its
final name, which such stores publish whole or not at all. Readers (pyarrow, pandas, Spark) skip ``.``-
and ``_``-prefixed names, so they never see a part being written. A run stopped at any moment therefore
leaves only whole parts, and loses at most the batches in flight; a rerun reads the ids of the committed
parts (`committed_ids`, the id column only) and scores exactly the missing rows.

Nothing here imports Ray: the CLI decides before Ray starts whether anything is missing.

May import: pyarrow, the standard library, `zsnli.batch.job`.
"""

from __future__ import annotations

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
