"""The Ray side of ``zsnli-batch``: start or join Ray, build the Ray Data pipeline, run it, summarise.

`run` takes a checked `zsnli.batch.job.Job`. Traps handled for a first run on a
small machine: a local Ray gets at least ``actors x CPUs per actor + 3``
logical CPUs (the read, write and checkpoint-filter tasks must still be
schedulable next to busy actors, or the pipeline waits forever); the input is
cut into blocks of ``--batch-rows`` rows (a small file is otherwise one block
scored by one actor); actor start-up (model load, 10-20 s on CPU) is logged.

May import: ray, pyarrow, `zsnli.batch.job`, `zsnli.batch.predictor`. Imported lazily by `zsnli.batch.cli.main`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import ray

from .job import CHECKPOINT_DIR, Job, is_url
from .predictor import FAULT_MARKER_ENV, Predictor

logger = logging.getLogger("zsnli.batch")


@dataclass
class Summary:
    """What a run did: rows scored by this run, of which errors; rows in the output; seconds."""

    rows: int
    errors: int
    total_rows: int
    seconds: float
    actors: int
    gpus_per_actor: int

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (f"zsnli-batch: {self.rows} rows scored ({self.errors} with an error) in {self.seconds:.1f} s = "
                f"{rate:.2f} docs/s with {self.actors} actor(s) x {self.gpus_per_actor} GPU; "
                f"{self.total_rows} rows in the output")


PROGRESS_EVERY_S = 30.0


class Ticker:
    """Periodic progress lines when stderr is not a terminal (Ray draws bars on one)."""

    def __init__(self, read: Callable[[], int], every_s: float = PROGRESS_EVERY_S) -> None:
        self.read, self.every_s = read, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="zsnli-batch-progress", daemon=True)
        self._t0 = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                rows = self.read()
            except Exception:  # noqa: BLE001 - progress is best effort
                continue
            elapsed = time.monotonic() - self._t0
            logger.info("progress: %d rows scored in %.0f s (%.1f docs/s)", rows, elapsed, rows / max(elapsed, 1e-9))

    def __enter__(self) -> "Ticker":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


@ray.remote(num_cpus=0)
class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += n

    def read(self) -> int:
        return self.n


class _CountingPredictor(Predictor):
    """`Predictor` that also reports its row count to the driver's progress counter."""

    def __init__(self, *args, counter=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._counter = counter

    def __call__(self, batch: pa.Table) -> pa.Table:
        out = super().__call__(batch)
        if self._counter is not None:
            self._counter.add.remote(out.num_rows)
        return out


def output_files(output: str) -> set[str]:
    """The Parquet files of the output (``_checkpoint`` is skipped); empty when there is no output yet."""
    try:
        return set(pads.dataset(output, format="parquet").files)
    except (FileNotFoundError, pa.ArrowInvalid):
        return set()


def output_counts(output: str, exclude: set[str] = frozenset()) -> tuple[int, int]:
    """``(rows, rows with an error)`` in the output's Parquet files, less the files in ``exclude``."""
    files = sorted(output_files(output) - set(exclude))
    if not files:
        return 0, 0
    table = pads.dataset(files, format="parquet", filesystem=pads.dataset(output, format="parquet").filesystem
                         ).to_table(columns=["error"])
    return table.num_rows, table.num_rows - table.column("error").null_count


def _local_path(path: str) -> str:
    return path if is_url(path) else str(Path(path).resolve())


def _start_ray(job: Job) -> tuple[int, int, bool]:
    """Join ``--ray-address`` / an already running Ray, or start a local one; returns
    ``(actors, gpus per actor, started here)``."""
    started = False
    if not ray.is_initialized():
        if job.ray_address:
            ray.init(address=job.ray_address, logging_level=logging.WARNING)
        else:
            import torch

            gpus = torch.cuda.device_count()
            actors = job.actors or gpus or max(1, (os.cpu_count() or 1) - 1)
            cpus = max(os.cpu_count() or 1, int(actors * job.cpus_per_actor + 0.999) + 3)
            logger.info("starting a local Ray: %d logical CPUs (actors x CPUs + 3), %d GPU(s)", cpus, gpus)
            ray.init(num_cpus=cpus, num_gpus=gpus, include_dashboard=False, logging_level=logging.WARNING)
        started = True
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    actors = job.actors or gpus or max(1, int(resources.get("CPU", 1)) - 1)
    gpus_per_actor = 1 if gpus else 0
    need = actors * job.cpus_per_actor + 2
    if resources.get("CPU", 0) < need:
        logger.warning("the cluster has %s logical CPUs for %d actors x %s CPUs: with fewer than %s the read and "
                       "write tasks may never be scheduled", resources.get("CPU", 0), actors, job.cpus_per_actor, need)
    return actors, gpus_per_actor, started


def _read(job: Job, path: str):
    if job.fmt == "parquet":
        return ray.data.read_parquet(path).select_columns(job.spec.input_columns())
    return ray.data.read_json(path)  # pyarrow reader: newline-delimited JSON, Arrow blocks


def run(job: Job) -> Summary:
    """Run the pipeline for ``job`` (Ray started here is shut down after); returns the `Summary`."""
    from ray.data import ActorPoolStrategy, DataContext
    from ray.data.checkpoint import CheckpointConfig

    actors, gpus_per_actor, started = _start_ray(job)
    settings = job.settings
    if not job.ray_address:
        settings = settings.with_(model_dir=_local_path(settings.model_dir),
                                  manifest_path=str(settings.resolved_manifest_path().resolve()),
                                  calibration_path=str(settings.resolved_calibration_path().resolve())
                                  if settings.resolved_calibration_path().is_file() else None)
    output, source = _local_path(job.output), _local_path(job.input)
    existing = output_files(output)
    before, _ = output_counts(output)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = sys.stderr.isatty()
    ctx.checkpoint_config = CheckpointConfig(id_column=job.spec.id_col, checkpoint_path=f"{output}/{CHECKPOINT_DIR}",
                                             delete_checkpoint_on_success=False)
    if before:
        logger.info("resuming: %d rows already in %s are skipped", before, output)
    counter = _Counter.remote()
    logger.info("scoring with %d actor(s) x %d GPU, %s CPU each; each loads the model first (10-20 s on CPU)",
                actors, gpus_per_actor, job.cpus_per_actor)
    t0 = time.monotonic()
    try:
        ds = _read(job, source).repartition(target_num_rows_per_block=job.batch_rows)
        ds = ds.map_batches(
            _CountingPredictor, batch_size=job.batch_rows, batch_format="pyarrow",
            compute=ActorPoolStrategy(size=actors), num_cpus=job.cpus_per_actor, num_gpus=gpus_per_actor or None,
            fn_constructor_kwargs=dict(settings=settings, spec=job.spec, counter=counter,
                                       fault_marker=os.environ.get(FAULT_MARKER_ENV)))
        ticker = contextlib.nullcontext() if ctx.enable_progress_bars else Ticker(
            lambda: ray.get(counter.read.remote(), timeout=10))
        with ticker:
            ds.write_parquet(output, min_rows_per_file=job.rows_per_file)
    finally:
        ctx.checkpoint_config = None
        ray.kill(counter)
        if started:
            ray.shutdown()
    seconds = time.monotonic() - t0
    total, _ = output_counts(output)
    rows, errors = output_counts(output, exclude=existing)
    return Summary(rows, errors, total, seconds, actors, gpus_per_actor)
