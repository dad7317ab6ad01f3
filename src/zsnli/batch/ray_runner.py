"""The Ray side of ``zsnli-batch``: start or join Ray, build the Ray Data pipeline, run it, summarise.

`run` takes a checked `zsnli.batch.job.Job`. Sizing (`plan_resources`): the actor count is decided once;
a local Ray started here gets ``actors x CPUs per actor + SPARE_CPUS`` logical CPUs at least (the
read, filter and repartition tasks must still be schedulable next to the scoring actors, or the
pipeline waits forever); on a cluster the default actor count leaves
`SPARE_CPUS` free, and an explicit ``--actors`` that leaves fewer is refused in one line before
anything runs. The input is cut into blocks of ``--batch-rows`` rows (a small file is otherwise one
block scored by one actor); actor start-up (model load, 10-20 s on CPU) is logged.

Commits as it goes: the scored batches come back to this process (`scored_batches`: exactly ``--batch-rows``
rows each, the last fewer, pulled in a thread) and each is committed at once as one Parquet part
(`zsnli.batch.output.PartWriter`: atomic), so a stop at any moment loses at most the batches in flight: the
scored ones not yet committed (at most `COMMIT_QUEUE_BATCHES` + 1 + `PREFETCH_BATCHES` = 6 batches of
``--batch-rows`` rows) and those the actors are scoring; rows already committed are dropped as the
input is read (`SkipIds`). `commit_stream` checks a stop flag (set by the CLI's SIGINT/SIGTERM handler)
every `POLL_S` seconds and raises `Stopped` once the pipeline thread has closed its iterator (at most
`STOP_GRACE_S`); the Ray started here is then shut down, its teardown noise silenced (`quiet_ray_teardown`).

Never hangs: a watchdog (`Progress`) fails the run with one line (`Stalled`, exit 1) when nothing moved
(no row scored, no actor finished loading) for ``--stall-timeout`` seconds; what was written stays,
and rerunning resumes. Progress lines (rows committed of the missing rows, time left) are
`zsnli.runtime.progress`'s.

May import: ray, pyarrow, `zsnli.batch.job`, `zsnli.batch.output`, `zsnli.batch.predictor`,
`zsnli.runtime.progress`. Imported lazily by `zsnli.batch.cli.main`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
import ray

from .job import Job, UsageError, is_url
from .output import PartWriter, output_counts
from .predictor import FAULT_MARKER_ENV, Predictor
from ..runtime.progress import progress as progress_reporter

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


SPARE_CPUS = 3
"""Logical CPUs the pipeline needs besides the scoring actors': the read, the committed-id filter and the
repartition tasks (with fewer, the pipeline is never scheduled and waits forever)."""


class Stalled(RuntimeError):
    """No row was scored for the stall timeout: the run cannot make progress (one-line message, exit 1)."""


class Progress:
    """The watchdog: watches ``read() -> (rows scored, progress events)`` every ``tick_s`` and sets
    ``stalled`` once neither has moved for ``stall_s`` seconds (0: never). An actor that finished loading
    counts as an event. (The progress lines are `zsnli.runtime.progress`'s, counted in rows committed.)"""

    def __init__(self, read: Callable[[], tuple[int, int]], stall_s: float = 0.0, tick_s: float = 5.0) -> None:
        self.read, self.stall_s = read, stall_s
        self.tick_s = min(tick_s, stall_s / 4) if stall_s else tick_s
        self.rows, self.stalled = 0, False
        self._seen: tuple[int, int] = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="zsnli-batch-watchdog", daemon=True)
        self._moved = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                seen = tuple(self.read())
            except Exception:  # noqa: BLE001 - best effort (a busy driver may time out)
                seen = self._seen
            now = time.monotonic()
            if seen != self._seen:
                self._seen, self._moved = seen, now
            self.rows = seen[0]
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
                         f"CPU + {SPARE_CPUS} for the read, filter and repartition work need {need:g} (else the "
                         f"pipeline is never scheduled): use --actors {max(1, int((cpus - SPARE_CPUS) // per))} or "
                         "fewer, or a larger cluster")
    size = max(int(cpus), int(actors * per + 0.999) + SPARE_CPUS) if local else int(cpus)
    return actors, (1 if gpus else 0), size


@contextlib.contextmanager
def _own_signals():
    """Around ``ray.init``: SIGINT is ignored while Ray spawns its processes (an ignored signal is
    inherited, so a terminal's Ctrl-C, sent to the whole process group, reaches only this driver instead
    of killing the raylet under it, which aborts the driver), and this process's SIGINT/SIGTERM handlers
    are restored afterwards (``ray.init`` installs its own SIGTERM handler, ``sys.exit``, in the main
    thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


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
        with _own_signals():
            ray.init(num_cpus=cpus, num_gpus=gpus, include_dashboard=False, logging_level=logging.WARNING)
        return actors, gpus_per_actor, True
    started = False
    if not ray.is_initialized():
        with _own_signals():
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


def run(job: Job, stop: threading.Event | None = None, done_ids: pa.ChunkedArray | None = None,
        missing: int | None = None) -> Summary:
    """Run the pipeline for ``job`` (a Ray started here is shut down after) and return the `Summary`.

    Rows whose id is in ``done_ids`` (the committed parts, `zsnli.batch.output.committed_ids`) are
    dropped as they are read; every scored batch comes back to this process and is committed as one
    Parquet part at once (`zsnli.batch.output.PartWriter`), so a stop loses at most the batches in
    flight. ``missing``: the rows to score (the progress total). Raises `Stopped` when ``stop`` is set
    (SIGINT/SIGTERM: the parts written stay), `Stalled` when nothing moved for the stall timeout."""
    from ray.data import ActorPoolStrategy, DataContext

    stop = stop if stop is not None else threading.Event()
    actors, gpus_per_actor, started = _start_ray(job)
    settings = job.settings
    if not job.ray_address:
        settings = settings.with_(model_dir=_local_path(settings.model_dir),
                                  manifest_path=str(settings.resolved_manifest_path().resolve()),
                                  calibration_path=str(settings.resolved_calibration_path().resolve())
                                  if settings.resolved_calibration_path().is_file() else None)
    output, source = _local_path(job.output), _local_path(job.input)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False  # progress is zsnli.runtime.progress's: rows committed, time left
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False  # not the whole DataContext in the user's log
    counter = _Counter.remote()
    logger.info("scoring with %d actor(s) x %d GPU, %s CPU each; each loads the model first (10-20 s on CPU)",
                actors, gpus_per_actor, job.cpus_per_actor)
    t0 = time.monotonic()
    writer = PartWriter(output)
    try:
        ds = _read(job, source)
        if done_ids is not None and len(done_ids):
            ds = ds.map_batches(SkipIds(job.spec.id_col, done_ids), batch_format="pyarrow", batch_size=None)
        ds = ds.repartition(target_num_rows_per_block=job.batch_rows)
        ds = ds.map_batches(
            _CountingPredictor, batch_size=job.batch_rows, batch_format="pyarrow",
            compute=ActorPoolStrategy(size=actors), num_cpus=job.cpus_per_actor, num_gpus=gpus_per_actor or None,
            fn_constructor_kwargs=dict(settings=settings, spec=job.spec, counter=counter,
                                       fault_marker=os.environ.get(FAULT_MARKER_ENV)))
        watch = Progress(lambda: ray.get(counter.read.remote(), timeout=10), stall_s=job.stall_timeout_s)
        with watch, progress_reporter(missing, "zsnli-batch", "rows") as advance:
            commit_stream(lambda: scored_batches(ds, job.batch_rows),
                          writer, watch, stop, lambda: _stalled(job, watch, actors), advance)
    finally:
        with contextlib.suppress(Exception):
            ray.kill(counter)
        if started:
            if stop.is_set():
                quiet_ray_teardown()
            ray.shutdown()
    seconds = time.monotonic() - t0
    total, _ = output_counts(output)
    return Summary(writer.rows, writer.errors, total, seconds, actors, gpus_per_actor)


class SkipIds:
    """``map_batches`` function dropping the rows whose id is in ``done`` (the committed ids)."""

    def __init__(self, id_col: str, done: pa.ChunkedArray) -> None:
        self.id_col, self.done = id_col, done.combine_chunks() if isinstance(done, pa.ChunkedArray) else done

    def __call__(self, batch: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        ids = batch.column(self.id_col)
        done = self.done
        if done.type != ids.type:
            try:
                done = done.cast(ids.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                done = pa.array([str(v) for v in done.to_pylist()])
                ids = pa.array([str(v) for v in ids.to_pylist()])
        return batch.filter(pc.invert(pc.is_in(ids, value_set=done)))


COMMIT_QUEUE_BATCHES = 4
"""Scored batches waiting to be committed (`commit_stream`'s queue) at most."""
PREFETCH_BATCHES = 1
"""Scored batches Ray Data fetches ahead of the one `commit_stream` is handed."""


def scored_batches(ds, batch_rows: int) -> Iterable[pa.Table]:
    """The scored rows of the Ray Dataset ``ds`` back in this process, as pyarrow tables of exactly
    ``batch_rows`` rows each (the last one fewer), whatever blocks Ray made (a block is not a batch: blocks
    of 100 rows came back at ``--batch-rows 64``); each becomes one part. Prefetches `PREFETCH_BATCHES`."""
    return ds.iter_batches(batch_size=batch_rows, batch_format="pyarrow", prefetch_batches=PREFETCH_BATCHES)


class Stopped(RuntimeError):
    """The run was asked to stop (SIGINT/SIGTERM); what was committed stays (one line, exit 130/143)."""


_END = object()


def commit_stream(batches: Callable[[], Iterable[pa.Table]], writer, watch: Progress, stop: threading.Event,
                  stalled: Callable[[], BaseException], advance: Callable[[int], None]) -> None:
    """Pull ``batches()`` in a daemon thread and commit each table with ``writer.write`` here, as it arrives.

    Checks ``stop`` and ``watch.stalled`` at least every `POLL_S` seconds: raises `Stopped` when ``stop`` is
    set, once the pulling thread has closed the iterator or after `STOP_GRACE_S` (the batch being scored is
    lost, every committed one stays), ``stalled()``'s error when the watchdog fired, and whatever the
    pipeline raised."""
    pending: queue.Queue = queue.Queue(maxsize=COMMIT_QUEUE_BATCHES)

    def pump() -> None:
        tables = None
        try:
            tables = iter(batches())
            for table in tables:
                while not stop.is_set():
                    try:
                        pending.put(table, timeout=POLL_S)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            pending.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the committing thread
            pending.put(exc)
        finally:
            with contextlib.suppress(Exception):
                getattr(tables, "close", lambda: None)()  # Ray Data shuts its executor down here

    pumping = threading.Thread(target=pump, name="zsnli-batch-pipeline", daemon=True)
    pumping.start()
    while True:
        if stop.is_set():
            pumping.join(STOP_GRACE_S)  # the pipeline's iterator closed by its own thread, Ray still up
            raise Stopped("stopped")
        if watch.stalled:
            raise stalled()
        try:
            item = pending.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if item is _END:
            return
        if isinstance(item, BaseException):
            if stop.is_set():
                raise Stopped("stopped")
            raise item
        writer.write(item)
        advance(item.num_rows)


POLL_S = 0.25
"""Seconds between two checks of the stop flag and the watchdog while waiting for a batch."""

STOP_GRACE_S = 2.0
"""Seconds a stop waits for the pipeline thread to close Ray Data's iterator before Ray is shut down (a
batch still being scored is not waited for beyond this: it is lost either way)."""


def quiet_ray_teardown() -> Callable[[], None]:
    """After a requested stop: silence what Ray's threads print while they end under a shut-down Ray.

    Every logger named ``ray`` or ``ray.*`` goes to CRITICAL (Ray Data's loggers carry their own levels,
    so setting ``ray`` alone does not reach them), and `sys.unraisablehook` drops exceptions whose
    traceback passes through Ray's package during finalisation ("Exception ignored in: <generator ...>"
    from an iterator closed after ``ray.shutdown``); anything else still reaches the previous hook.
    Returns a function that restores the hook and the levels (the CLI exits instead)."""
    ray_dir = os.path.dirname(os.path.abspath(ray.__file__)) + os.sep
    names = ["ray"] + [n for n in logging.root.manager.loggerDict if n.startswith("ray.")]
    levels = {n: logging.getLogger(n).level for n in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        tb = unraisable.exc_traceback
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(ray_dir):
                return
            tb = tb.tb_next
        previous(unraisable)

    sys.unraisablehook = hook

    def restore() -> None:
        sys.unraisablehook = previous
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)

    return restore


def _stalled(job: Job, watch: Progress, actors: int) -> Stalled:
    try:
        resources = ray.cluster_resources()
    except Exception:  # noqa: BLE001 - the message only
        resources = {}
    return Stalled(f"no row scored in the last {job.stall_timeout_s:g} s ({watch.rows} scored by this run): "
                   f"the pipeline cannot make progress (the cluster has {resources.get('CPU', 0):g} CPUs and "
                   f"{resources.get('GPU', 0):g} GPUs for {actors} actor(s) x {job.cpus_per_actor:g} CPU plus "
                   f"the read and filter work); what was written is kept: rerun the same command to resume, "
                   f"with fewer --actors or more CPUs (--stall-timeout sets the limit)")
