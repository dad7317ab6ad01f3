"""The Ray side of ``zsnli-batch``: start or join Ray, build the Ray Data pipeline, run it, summarise.

`run` takes a checked `zsnli.batch.job.Job`. Sizing (`plan_resources`): the actor count is decided once;
a local Ray started here gets ``actors x CPUs per actor + SPARE_CPUS`` logical CPUs at least (the
read and write tasks and, on a resume, the checkpoint-filter actor must still be schedulable next to the
scoring actors, or the pipeline waits forever); on a cluster the default actor count leaves
`SPARE_CPUS` free, and an explicit ``--actors`` that leaves fewer is refused in one line before
anything runs. The input is cut into blocks of ``--batch-rows`` rows (a small file is otherwise one
block scored by one actor); actor start-up (model load, 10-20 s on CPU) is logged.

Never hangs: a watchdog (`Progress`) fails the run with one line (`Stalled`, exit 1) when nothing moved
(no row scored, no actor finished loading) for ``--stall-timeout`` seconds; what was written stays,
and rerunning resumes.

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

from .job import CHECKPOINT_DIR, Job, UsageError, is_url
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
SPARE_CPUS = 3
"""Logical CPUs the pipeline needs besides the scoring actors': a read task, a write task and, when a run
resumes, Ray Data's checkpoint-filter actor (with fewer, a resumed run is never scheduled)."""


class Stalled(RuntimeError):
    """No row was scored for the stall timeout: the run cannot make progress (one-line message, exit 1)."""


class Progress:
    """Watches ``read() -> (rows scored, progress events)``: a log line every ``every_s`` when ``log`` (stderr
    is not a terminal; Ray draws bars on one), and ``stalled`` once neither has moved for ``stall_s`` seconds
    (0: never). An actor that finished loading counts as an event."""

    def __init__(self, read: Callable[[], tuple[int, int]], every_s: float = PROGRESS_EVERY_S, stall_s: float = 0.0,
                 log: bool = True) -> None:
        self.read, self.every_s, self.stall_s, self.log = read, every_s, stall_s, log
        self.rows, self.stalled = 0, False
        self._seen: tuple[int, int] = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="zsnli-batch-progress", daemon=True)
        self._t0 = self._moved = time.monotonic()

    def _loop(self) -> None:
        tick = min(self.every_s, self.stall_s / 4) if self.stall_s else self.every_s
        next_log = self._t0 + self.every_s
        while not self._stop.wait(tick):
            try:
                seen = tuple(self.read())
            except Exception:  # noqa: BLE001 - progress is best effort (a busy driver may time out)
                seen = self._seen
            now = time.monotonic()
            if seen != self._seen:
                self._seen, self._moved = seen, now
            rows = self.rows = seen[0]
            if self.log and now >= next_log:
                next_log = now + self.every_s
                elapsed = now - self._t0
                logger.info("progress: %d rows scored in %.0f s (%.1f docs/s)", rows, elapsed,
                            rows / max(elapsed, 1e-9))
            if self.stall_s and now - self._moved > self.stall_s:
                self.stalled = True
                return

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


@ray.remote(num_cpus=0)
class _Counter:
    """Rows scored, and progress events (rows scored or an actor ready): what the watchdog watches."""

    def __init__(self) -> None:
        self.n = self.events = 0

    def add(self, n: int) -> None:
        self.n += n
        self.events += 1

    def read(self) -> tuple[int, int]:
        return self.n, self.events


class _CountingPredictor(Predictor):
    """`Predictor` that also reports to the driver's progress counter: once loaded, then its rows per call."""

    def __init__(self, *args, counter=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._counter = counter
        if counter is not None:
            counter.add.remote(0)  # loaded: a model that takes minutes to load is progress, not a stall

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


def plan_resources(job: Job, cpus: float, gpus: int, local: bool) -> tuple[int, int, int]:
    """``(actors, gpus per actor, logical CPUs)`` for ``cpus`` / ``gpus`` (this machine's when ``local``: the
    CPUs a local Ray is started with, at least actors x CPUs per actor + `SPARE_CPUS`; else the cluster's).
    Default actors: one per GPU, else what leaves `SPARE_CPUS` for the pipeline's other work (at least 1;
    on a local Ray the machine's CPUs - 1). Raises ``UsageError``
    when ``--actors`` on a cluster leaves fewer than `SPARE_CPUS` logical CPUs (the pipeline could not
    be scheduled: it would wait forever)."""
    per = job.cpus_per_actor
    if job.actors:
        actors = job.actors
    elif gpus:
        actors = gpus
    elif local:
        actors = max(1, int(cpus) - 1)
    else:
        actors = max(1, int((cpus - SPARE_CPUS) // per))
    need = actors * per + SPARE_CPUS
    if not local and cpus < need:
        raise UsageError(f"--actors {actors}: the Ray cluster has {cpus:g} logical CPUs; {actors} actor(s) x {per:g} "
                         f"CPU + {SPARE_CPUS} for the read, write and checkpoint-filter work need {need:g} (else the "
                         f"pipeline is never scheduled): use --actors {max(1, int((cpus - SPARE_CPUS) // per))} or "
                         "fewer, or a larger cluster")
    size = max(int(cpus), int(actors * per + 0.999) + SPARE_CPUS) if local else int(cpus)
    return actors, (1 if gpus else 0), size


def _start_ray(job: Job) -> tuple[int, int, bool]:
    """Join ``--ray-address`` / an already running Ray, or start a local one sized by `plan_resources`;
    returns ``(actors, gpus per actor, started here)``. The actor count is decided once (a local Ray's
    extra logical CPUs are for the read and write tasks, never for more actors)."""
    if not ray.is_initialized() and not job.ray_address:
        import torch

        gpus = torch.cuda.device_count()
        actors, gpus_per_actor, cpus = plan_resources(job, os.cpu_count() or 1, gpus, local=True)
        logger.info("starting a local Ray: %d logical CPUs (%d actor(s) x %g CPU + %d), %d GPU(s)", cpus, actors,
                    job.cpus_per_actor, cpus - int(actors * job.cpus_per_actor + 0.999), gpus)
        ray.init(num_cpus=cpus, num_gpus=gpus, include_dashboard=False, logging_level=logging.WARNING)
        return actors, gpus_per_actor, True
    started = False
    if not ray.is_initialized():
        ray.init(address=job.ray_address, logging_level=logging.WARNING)
        started = True
    resources = ray.cluster_resources()
    try:
        actors, gpus_per_actor, _ = plan_resources(job, resources.get("CPU", 0), int(resources.get("GPU", 0)),
                                                   local=False)
    except UsageError:
        if started:
            ray.shutdown()
        raise
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
        progress = Progress(lambda: ray.get(counter.read.remote(), timeout=10), stall_s=job.stall_timeout_s,
                            log=not ctx.enable_progress_bars)
        with progress:
            _watched(lambda: ds.write_parquet(output, min_rows_per_file=job.rows_per_file), progress, job, actors)
    finally:
        ctx.checkpoint_config = None
        with contextlib.suppress(Exception):
            ray.kill(counter)
        if started:
            ray.shutdown()
    seconds = time.monotonic() - t0
    total, _ = output_counts(output)
    rows, errors = output_counts(output, exclude=existing)
    return Summary(rows, errors, total, seconds, actors, gpus_per_actor)


def _watched(work: Callable[[], None], progress: Progress, job: Job, actors: int) -> None:
    """Run ``work`` (the pipeline) in a thread; raise `Stalled` as soon as ``progress`` says it stalled
    (the caller's ``ray.shutdown`` then ends the pipeline's tasks), else whatever ``work`` raised."""
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="zsnli-batch-pipeline", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
        if progress.stalled:
            try:
                resources = ray.cluster_resources()
            except Exception:  # noqa: BLE001 - the message only
                resources = {}
            raise Stalled(f"no row scored in the last {job.stall_timeout_s:g} s ({progress.rows} scored by this run): "
                          f"the pipeline cannot make progress (the cluster has {resources.get('CPU', 0):g} CPUs and "
                          f"{resources.get('GPU', 0):g} GPUs for {actors} actor(s) x {job.cpus_per_actor:g} CPU plus "
                          f"the read, write and checkpoint-filter work); what was written is kept: rerun the same command to resume, "
                          f"with fewer --actors or more CPUs (--stall-timeout sets the limit)")
    if "error" in outcome:
        raise outcome["error"]
