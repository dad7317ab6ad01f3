"""``zsnli-batch`` / ``python -m zsnli.batch``: classify a corpus on Ray Data, resumably.

Pipeline: ``ray.data.read_parquet`` / ``read_json`` (a local path or any
fsspec/pyarrow URL) -> streaming repartition into small blocks -> ``map_batches(
zsnli.batch.predictor.Predictor, compute=ActorPoolStrategy(size=N))`` (one GPU per
actor when the cluster has GPUs) -> ``write_parquet``. Each actor loads the model
once and scores through the server's own service, so a row gets the
probabilities ``POST /classify`` would give.

Resume: every scored batch is committed at once as one Parquet part
(`zsnli.batch.output`: written under a temporary name, then renamed), so a
stop at any moment loses at most the batches in flight. Before Ray starts the
ids of the committed parts are read (`zsnli.batch.output.committed_ids`) and
compared with the input's: when none is missing the run is a no-op (no Ray
start); else the committed ids are dropped as the input is read, so a rerun
scores exactly the missing rows. Ids must be unique and non-null: an input
with a missing or repeated id is refused before Ray starts (`check_ids`).
SIGINT and SIGTERM stop the run within seconds: one line saying what was
committed, exit 130 / 143, the parts kept (`zsnli.batch.ray_runner.Stopped`).
A run that cannot make progress (no row scored for ``--stall-timeout`` s)
fails with one line, exit 1 (`zsnli.batch.ray_runner.Stalled`).

One run per output: a run holds ``fcntl.flock`` on ``<output>/_zsnli-batch.lock`` from its checks to
its end (`zsnli.batch.output.lock_output`); a second run on the same output is refused in one line,
exit `LOCKED_EXIT`, before it touches anything. A dead run's lock file holds nothing.

Before Ray starts, the flags and the model are checked (the server's preflight:
model directory, ``training_manifest.json``, calibration): a mistake is one
line on stderr and exit code 2.

May import: pyarrow, `zsnli.batch.job`, `zsnli.batch.output`, `zsnli.batch.predictor`, `zsnli.config`, `zsnli.harness.cli` (the parser),
`zsnli.serving.startup`, and `zsnli.batch.ray_runner` (which imports Ray) only after the checks passed.
Nothing imports this module.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .job import Job, UsageError, is_url
from .output import OutputLocked, committed_ids, lock_output, output_counts, remove_temporaries
from .predictor import ColumnSpec
from ..config import RANGES, Settings, SettingsError
from ..harness.cli import UsageParser, one_line_errors, non_negative_float, positive_float, positive_int, usage_error
from ..serving.startup import STARTUP_ERRORS, configure_logging, missing_model_dir, one_line, preflight

logger = logging.getLogger("zsnli.batch")


PROG = "zsnli-batch"
LOCKED_EXIT = 75
"""Exit code of a run refused because another run holds the output's lock (``EX_TEMPFAIL``: retry later)."""


def build_parser() -> UsageParser:
    """The command-line flags (see docs/batch.md)."""
    p = UsageParser(prog=PROG, description="Classify a Parquet/JSONL corpus on Ray Data; writes Parquet.")
    p.add_argument("input", help="Parquet file or directory, or JSONL file; local path or URL (s3://, gs://, ...)")
    p.add_argument("--output", required=True, help="output directory (Parquet); rerun with it to resume")
    p.add_argument("--input-format", choices=("parquet", "jsonl"), help="default: from the input's suffix")
    p.add_argument("--model-dir", help="model directory (default ZSNLI_MODEL_DIR or ./model)")
    p.add_argument("--id-col", default="id")
    p.add_argument("--text-col", default="text")
    p.add_argument("--labels-col", help="column holding each row's list of labels")
    p.add_argument("--labels", nargs="+", help="the labels of every row (instead of --labels-col)")
    p.add_argument("--hypothesis-template", help="e.g. 'This text is about {}.' (default: labels are hypotheses)")
    p.add_argument("--multi-label", action="store_true", help="score each label on its own")
    p.add_argument("--actors", type=positive_int, default=None, help="scoring actors (default: GPUs, else CPUs - 1, >= 1)")
    p.add_argument("--cpus-per-actor", type=positive_float, default=1.0, help="CPUs (and torch threads) per actor")
    p.add_argument("--batch-rows", type=positive_int, default=64, help="rows per actor call and per block (default 64)")
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"),
                   help="an existing cluster (default $RAY_ADDRESS; unset: a local Ray)")
    p.add_argument("--stall-timeout", type=non_negative_float, default=600.0,
                   help="fail (exit 1, output kept for a resume) when no row was scored for this many seconds "
                        "(default 600; 0: never)")
    return p


HTTP_ONLY_SETTINGS = ("api_key", "public_url", "forwarded_allow_ips", "read_timeout_s", "max_connections",
                      "keep_alive_s", "max_body_bytes", "max_batch_items", "allowed_hosts", "allowed_origins")
"""`zsnli.config.Settings` fields that only the HTTP server reads (its key, links, proxies, connections, request
bodies and arrays, the hosts and web pages it answers): a batch job serves no request, so it never reads them
(`batch_env`)."""


def batch_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the ``ZSNLI_*`` variables of `HTTP_ONLY_SETTINGS`: a value the server would refuse (an
    invalid ``ZSNLI_API_KEY``) must not stop a job that never uses it."""
    drop = {Settings.env_name(name) for name in HTTP_ONLY_SETTINGS}
    return {k: v for k, v in env.items() if k not in drop}


def parse_job(argv: Sequence[str] | None) -> Job:
    """Parse and check the flags and the model (no Ray). Raises ``UsageError`` (one line); a flag the parser
    refuses exits 2 with one line (`zsnli.harness.cli.UsageParser`)."""
    a = build_parser().parse_args(argv)
    if (a.labels is None) == (a.labels_col is None):
        raise UsageError("give exactly one of --labels (every row) or --labels-col (a list per row)")
    if a.hypothesis_template is not None and a.hypothesis_template.count("{}") != 1:
        raise UsageError(f"--hypothesis-template must contain exactly one {{}}, got {a.hypothesis_template!r}")
    fmt = a.input_format or _format_of(a.input)
    if not is_url(a.input) and not Path(a.input).exists():
        raise UsageError(f"input not found: {a.input}")
    try:
        # --model-dir names the model: a ZSNLI_MODEL_ID in the environment does not override it
        overrides = {"model_dir": a.model_dir, "model_id": None, "model_revision": None} if a.model_dir else {}
        settings = Settings.from_env(batch_env(os.environ), **overrides)
    except SettingsError as exc:
        raise UsageError(one_line(exc)) from None
    settings = batch_settings(settings, a.cpus_per_actor)
    missing = missing_model_dir(settings, "--model-dir", given=bool(a.model_dir))
    if missing:
        raise UsageError(missing)
    try:
        preflight(settings)
    except STARTUP_ERRORS as exc:
        raise UsageError(f"model check failed: {one_line(exc)}") from None
    check_columns(a.input, fmt, [a.id_col, a.text_col] + ([a.labels_col] if a.labels_col else []))
    ids = check_ids(a.input, fmt, a.id_col)
    spec = ColumnSpec(a.id_col, a.text_col, a.labels_col, tuple(a.labels) if a.labels else None,
                      a.hypothesis_template, a.multi_label)
    return Job(a.input, a.output.rstrip("/"), fmt, spec, settings, a.actors, a.cpus_per_actor, a.batch_rows,
               a.ray_address, a.stall_timeout, ids)


def _format_of(path: str) -> str:
    low = path.lower().rstrip("/")
    if low.endswith((".jsonl", ".ndjson", ".json", ".jsonl.gz")):
        return "jsonl"
    if low.endswith((".parquet", ".pq")) or (not is_url(path) and Path(path).is_dir()):
        return "parquet"
    raise UsageError(f"cannot tell the format of {path}: use --input-format parquet or jsonl")


def check_columns(path: str, fmt: str, wanted: list[str]) -> None:
    """Raise ``UsageError`` naming the flag of a column the input does not have (Parquet: its schema;
    JSONL: the keys of the first record)."""
    import json

    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    try:
        if fmt == "parquet":
            names = set(pads.dataset(path, format="parquet").schema.names)
        else:
            fs, where = (pafs.FileSystem.from_uri(path) if is_url(path)
                         else (pafs.LocalFileSystem(), str(Path(path).resolve())))
            with fs.open_input_stream(where, compression="detect") as stream:
                first = stream.read(1 << 20).split(b"\n", 1)[0]
            names = set(json.loads(first)) if first.strip() else set()
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path} as {fmt}: {one_line(exc)[:300]}") from None
    flags = ("--id-col", "--text-col", "--labels-col")
    for flag, name in zip(flags, wanted):
        if name not in names:
            raise UsageError(f"{flag}: no column {name!r} in {path} (it has: {', '.join(sorted(names)[:20])})")


def check_ids(path: str, fmt: str, id_col: str):
    """The input's ids (a pyarrow array). Raise ``UsageError`` (``--id-col``) when an id is missing or given twice: the output has one row per
    id and a resumed run skips the ids already written, so ids must be unique and non-null. Reads the id
    column only (Parquet: that column; JSONL: each record's id field, the rest ignored)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    try:
        if fmt == "parquet":
            ids = pads.dataset(path, format="parquet").to_table(columns=[id_col]).column(id_col)
        else:
            ids = _jsonl_ids(path, id_col)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise UsageError(f"--id-col: cannot read the {id_col!r} values of {path}: {one_line(exc)[:300]}") from None
    if ids.null_count:
        raise UsageError(f"--id-col: {ids.null_count} row(s) of {path} have no {id_col!r} (ids must be unique and "
                         "non-null: the output has one row per id, and a resumed run skips the ids already written)")
    counts = pc.value_counts(ids)
    dups = [(c["values"], c["counts"]) for c in counts.to_pylist() if c["counts"] > 1]
    if dups:
        shown = ", ".join(f"{v!r} x{n}" for v, n in dups[:3]) + (", ..." if len(dups) > 3 else "")
        raise UsageError(f"--id-col: {len(dups)} {id_col!r} value(s) of {path} appear more than once ({shown}); "
                         "ids must be unique: the output has one row per id, and a resumed run skips the ids "
                         "already written")
    return ids


def _jsonl_ids(path: str, id_col: str):
    """The ``id_col`` field of every JSONL record (a pyarrow array; a record without it gives null)."""
    import json

    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, where = (pafs.FileSystem.from_uri(path) if is_url(path) else (pafs.LocalFileSystem(), str(Path(path).resolve())))
    values = []
    with fs.open_input_stream(where, compression="detect") as stream:
        pending = b""
        while chunk := stream.read(1 << 22):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            values += [json.loads(line).get(id_col) for line in lines if line.strip()]
        if pending.strip():
            values.append(json.loads(pending).get(id_col))
    return pa.array([v if isinstance(v, (int, str)) or v is None else json.dumps(v) for v in values])


def batch_settings(settings: Settings, cpus_per_actor: float) -> Settings:
    """The service settings inside an actor: the longest request timeout `zsnli.config.RANGES` allows
    (an hour: a block of documents waits its turn), room in the queue for every document admitted at
    once, torch threads = the actor's CPUs."""
    capacity = max(settings.queue_capacity_pairs, 64 * 2 * settings.max_labels)
    threads = settings.torch_threads or max(1, int(cpus_per_actor))
    return settings.with_(request_timeout_s=max(settings.request_timeout_s, RANGES["request_timeout_s"][1]),
                          queue_capacity_pairs=capacity, torch_threads=threads, exit_on_startup_error=False)


def missing_rows(job: Job) -> tuple[int, Any]:
    """``(rows of the input not yet in the output, the committed ids or None)``, from the committed parts'
    id column (`zsnli.batch.output.committed_ids`) and the ids `check_ids` read; no Ray."""
    import pyarrow as pa
    import pyarrow.compute as pc

    done = committed_ids(job.output, job.spec.id_col)
    if done is None:
        return len(job.ids), None
    ids, seen = job.ids, done.combine_chunks()
    try:
        seen = seen.cast(ids.type) if seen.type != ids.type else seen
        present = pc.sum(pc.is_in(ids, value_set=seen)).as_py() or 0
        return len(ids) - present, done
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        have = {str(v) for v in seen.to_pylist()}
        return sum(str(v) not in have for v in ids.to_pylist()), done


class StopOnSignal:
    """While active, SIGINT and SIGTERM set ``event`` (``name``: the signal's) instead of raising inside
    Ray's threads; a second signal exits at once (128 + its number). Restores the previous handlers."""

    def __init__(self) -> None:
        self.event, self.name, self._old = threading.Event(), None, {}

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            raise SystemExit(128 + signum)
        self.name = signal.Signals(signum).name
        self.event.set()

    def __enter__(self) -> "StopOnSignal":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


@one_line_errors(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 done, 2 a flag, input or model mistake or more actors
    than the cluster can hold, `LOCKED_EXIT` (75) another run holds the output, 1 a run that stalled: no
    row scored for ``--stall-timeout`` seconds, or whose output could not be written (a full disk: one line), 130 / 143 stopped by SIGINT / SIGTERM, what was committed kept)."""
    try:
        job = parse_job(argv)
    except UsageError as exc:
        return usage_error(PROG, str(exc))
    configure_logging(job.settings.log_level)
    try:
        lock = lock_output(job.output)
    except OutputLocked as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return LOCKED_EXIT
    except OSError as exc:
        return usage_error(PROG, f"--output {job.output}: cannot lock it: {one_line(exc)[:300]}")
    with lock:
        return _run_locked(job)


def _run_locked(job: Job) -> int:
    """`main` after the output's lock is taken."""
    t0 = time.monotonic()
    try:
        removed = remove_temporaries(job.output)
        missing, done = missing_rows(job)
    except (OSError, ValueError) as exc:
        return usage_error(PROG, f"--output {job.output}: cannot read what it holds: {one_line(exc)[:300]}")
    if removed:
        logger.info("removed %d part(s) a stopped run left unfinished", removed)
    if not missing:
        total, _ = output_counts(job.output)
        print(f"{PROG}: nothing to do: all {len(job.ids)} rows of {job.input} are in {job.output} "
              f"({total} rows; checked in {time.monotonic() - t0:.1f} s, Ray not started)", flush=True)
        return 0
    if done is not None:
        logger.info("resuming: %d rows already in %s are skipped, %d to score", len(done), job.output, missing)
    # a stopped run's pipeline thread must fail, not start a second Ray (read when ray is imported)
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    try:
        import ray  # noqa: F401
    except ImportError:
        return usage_error(PROG, "Ray Data is not installed: pip install 'zsnli[batch]'")
    from .ray_runner import Stalled, Stopped, run

    with StopOnSignal() as stop:
        try:
            summary = run(job, stop.event, done, missing)
        except UsageError as exc:  # the cluster cannot hold the actors asked for
            return usage_error(PROG, str(exc))
        except Stalled as exc:
            print(f"{PROG}: {exc}", file=sys.stderr, flush=True)  # a failed run, not a usage mistake
            return 1
        except OSError as exc:  # a full disk, a revoked mount: parts committed so far are whole and kept
            rows, _ = output_counts(job.output)
            print(f"{PROG}: error: cannot write --output {job.output}: {one_line(exc)[:300]}; {rows} of "
                  f"{len(job.ids)} rows are committed there; fix it and rerun the same command to score the rest",
                  file=sys.stderr, flush=True)
            return 1
        except Stopped:
            rows, _ = output_counts(job.output)
            print(f"{PROG}: stopped by {stop.name}: {rows} of {len(job.ids)} rows are committed in {job.output}; "
                  "rerun the same command to score the rest", file=sys.stderr, flush=True)
            return 128 + getattr(signal, stop.name or "SIGINT").value
    print(summary.line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
