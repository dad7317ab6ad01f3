"""zsnli-batch on a 2-CPU machine (issue 22, item 11): the local Ray's sizing, a first run, a resume and a
rerun each finish (they used to wait forever with 3 actors on 4 logical CPUs); a stalled run fails in one
line; ids missing or repeated are refused before Ray. Ray is started by zsnli-batch itself here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import corpus_documents, verified_model_copy

ray = pytest.importorskip("ray", reason="the [batch] extra (Ray Data) is not installed")

import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from zsnli.batch import ray_runner as batch_ray  # noqa: E402
from zsnli.batch.cli import main  # noqa: E402
from zsnli.batch.job import Job, UsageError  # noqa: E402
from zsnli.batch.predictor import ColumnSpec  # noqa: E402


def job(actors=None, cpus_per_actor=1.0, stall=600.0) -> Job:
    return Job("in.jsonl", "out", "jsonl", ColumnSpec(), None, actors, cpus_per_actor, 8, None, stall)


@pytest.mark.parametrize("actors, cpus, gpus, local, want", [
    (None, 2, 0, True, (1, 0, 4)),        # a 2-core machine: one actor, 3 CPUs for read, write, checkpoint filter
    (2, 2, 0, True, (2, 0, 5)),
    (None, 16, 0, True, (15, 0, 18)),
    (None, 8, 2, True, (2, 1, 8)),
    (None, 5, 0, False, (2, 0, 5)),       # a cluster: leave 3 CPUs to the pipeline's other work
    (None, 9, 0, False, (6, 0, 9)),
    (3, 8, 0, False, (3, 0, 8)),
])
def test_plan_resources_decides_the_actors_once_and_leaves_room(actors, cpus, gpus, local, want):
    assert batch_ray.plan_resources(job(actors), cpus, gpus, local) == want


def test_more_actors_than_a_cluster_can_hold_is_refused_in_one_line():
    with pytest.raises(UsageError) as err:
        batch_ray.plan_resources(job(actors=3), 5, 0, local=False)
    assert str(err.value).startswith("--actors 3: the Ray cluster has 5 logical CPUs") and "--actors 2" in str(err.value)


class _Parts:
    def __init__(self):
        self.tables = []

    def write(self, table):
        self.tables.append(table)


def _never_stalled(*_):
    raise AssertionError("not stalled")


def test_a_stalled_pipeline_fails_in_one_line_within_the_timeout():
    release = threading.Event()
    progress = batch_ray.Progress(lambda: (0, 0), stall_s=0.6)

    def blocked():
        release.wait(60)
        return iter([])

    t0 = time.monotonic()
    with pytest.raises(batch_ray.Stalled) as err, progress:
        batch_ray.commit_stream(blocked, _Parts(), progress, threading.Event(),
                                lambda: batch_ray._stalled(job(actors=1, stall=0.6), progress, 1), lambda n: None)
    release.set()
    assert time.monotonic() - t0 < 5
    assert str(err.value).startswith("no row scored in the last 0.6 s") and "\n" not in str(err.value)


def test_progress_that_moves_never_stalls():
    count = iter(range(1000))
    progress = batch_ray.Progress(lambda: (0, next(count)), stall_s=0.6)  # events only

    def slow():
        time.sleep(1.5)
        yield pa.table({"id": [1]})

    parts = _Parts()
    with progress:
        batch_ray.commit_stream(slow, parts, progress, threading.Event(), _never_stalled, lambda n: None)
    assert not progress.stalled and [t.num_rows for t in parts.tables] == [1]


def test_every_batch_is_committed_as_it_arrives_and_a_stop_ends_the_wait_at_once():
    """A stop while the next batch is being scored returns within a poll (the batch in flight is lost,
    every earlier one is committed); without a stop, every batch is committed in order."""
    stop, second = threading.Event(), threading.Event()
    parts, counted = _Parts(), []

    def batches():
        yield pa.table({"id": [1, 2]})
        second.wait(60)  # the next batch takes "forever"
        yield pa.table({"id": [3]})

    def advance(n):
        counted.append(n)
        stop.set()  # the signal comes right after the first commit

    t0 = time.monotonic()
    with pytest.raises(batch_ray.Stopped):
        batch_ray.commit_stream(batches, parts, batch_ray.Progress(lambda: (0, 0)), stop, _never_stalled, advance)
    second.set()
    assert time.monotonic() - t0 < 5 and [t["id"].to_pylist() for t in parts.tables] == [[1, 2]] and counted == [2]


def test_parts_are_committed_atomically_and_read_back(tmp_path):
    from zsnli.batch import output

    out = tmp_path / "out"
    writer = output.PartWriter(str(out))
    writer.write(pa.table({"id": ["a", "b"], "error": [None, "x"]}))
    writer.write(pa.table({"id": ["c"], "error": [None]}))
    assert writer.write(pa.table({"id": pa.array([], pa.string()), "error": pa.array([], pa.string())})) is None
    (out / f"{output.TEMP_PREFIX}part-killed.parquet").write_bytes(b"PAR1 half a file")  # a run killed mid-write
    (out / "_checkpoint").mkdir()
    (out / "_checkpoint" / "x.parquet").write_bytes(b"old")
    assert output.committed_ids(str(out), "id").to_pylist() == ["a", "b", "c"]
    assert output.output_counts(str(out)) == (3, 1) and (writer.rows, writer.errors) == (3, 1)
    assert pads.dataset(str(out), format="parquet").to_table().num_rows == 3  # what readers see
    assert output.remove_temporaries(str(out)) == 1 and output.committed_ids(str(tmp_path / "none"), "id") is None


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, bert_dir):
    return verified_model_copy(bert_dir, tmp_path_factory.mktemp("small"))


def _rows(n=40):
    return [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in corpus_documents(n, seed=5)]


def _run(model, source, output, *extra) -> int:
    return main([str(source), "--output", str(output), "--model-dir", str(model), "--labels-col", "labels",
                 "--batch-rows", "8", "--stall-timeout", "1800", *extra])


@pytest.mark.timeout(5400)
def test_first_run_resume_and_rerun_finish_on_2_cpus(small_model, tmp_path, monkeypatch, capsys):
    assert not ray.is_initialized()
    monkeypatch.setattr(batch_ray.os, "cpu_count", lambda: 2)
    rows = _rows()
    full, first = tmp_path / "all.jsonl", tmp_path / "first.jsonl"
    full.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first.write_text("".join(json.dumps(r) + "\n" for r in rows[:15]))
    out = tmp_path / "out"
    assert _run(small_model, first, out) == 0
    assert "15 rows scored" in capsys.readouterr().out
    assert _run(small_model, full, out) == 0  # resume: the missing rows only
    printed = capsys.readouterr().out
    assert f"{len(rows) - 15} rows scored" in printed and "with 1 actor(s)" in printed
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("a finished output started Ray"))
    assert _run(small_model, full, out) == 0  # rerun of a finished output: a no-op, no Ray
    assert f"nothing to do: all {len(rows)} rows" in capsys.readouterr().out
    ids = pads.dataset(str(out), format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert not ray.is_initialized()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("problem", ["duplicate", "missing"])
def test_missing_or_repeated_ids_are_refused_before_ray(small_model, tmp_path, capsys, fmt, problem):
    rows = _rows(12)
    if problem == "duplicate":
        rows[5]["id"] = rows[2]["id"]
    else:
        rows[4]["id"] = None
    if fmt == "jsonl":
        source = tmp_path / "in.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        source = tmp_path / "in.parquet"
        pq.write_table(pa.Table.from_pylist(rows), source)
    assert _run(small_model, source, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("zsnli-batch: error: --id-col: "), err
    assert ("more than once" in err and repr(rows[2]["id"]) in err) if problem == "duplicate" else "no 'id'" in err
    assert not (tmp_path / "out").exists() and not ray.is_initialized()


def _stop_mid_run(cmd, env, out, how) -> tuple[int, str, float]:
    """Start ``cmd``, wait for its first committed part beyond what ``out`` holds, stop it ``how`` (Ctrl-C
    on its process group, or SIGTERM to it); returns (exit code, stderr, seconds from signal to exit)."""
    from zsnli.batch import output

    before = set(output.part_files(str(out)))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not set(output.part_files(str(out))) - before:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no part committed in 900 s"
            time.sleep(0.1)
        t0 = time.monotonic()
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: every process of the group
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.timeout(3600)
def test_a_stopped_run_keeps_every_committed_batch_and_the_rerun_scores_only_the_rest(small_model, tmp_path):
    """Ctrl-C, then SIGTERM, mid-run: each stops within seconds with one line and no traceback, the parts
    written stay as they are, and the third run scores exactly the rows still missing: every id once."""
    from conftest import REPO
    from zsnli.batch import output

    rows = _rows(400)
    source, out = tmp_path / "in.jsonl", tmp_path / "out"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [sys.executable, "-m", "zsnli.batch", str(source), "--output", str(out), "--model-dir", str(small_model),
           "--labels-col", "labels", "--batch-rows", "4", "--actors", "1", "--stall-timeout", "1800"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ZSNLI_LOG_LEVEL": "warning"}
    kept: dict[str, bytes] = {}
    for how, code in (("SIGINT", 130), ("SIGTERM", 143)):
        got, err, took = _stop_mid_run(cmd, env, out, how)
        committed = output.committed_ids(str(out), "id").to_pylist()
        assert got == code and took < 15, (got, took, err[-3000:])
        ours = "\n".join(line for line in err.splitlines() if "(raylet)" not in line)  # Ray's own daemon's lines:
        # under load its shutdown may log "Failed to send wait complete: RpcError ... Socket closed" (CI, 2026-12-07)
        assert "Traceback" not in ours and "Error" not in ours.replace("error", ""), err[-3000:]
        stop_lines = [line for line in err.splitlines() if line.startswith("zsnli-batch: stopped by")]
        assert stop_lines == [f"zsnli-batch: stopped by {how}: {len(committed)} of {len(rows)} rows are committed "
                              f"in {out}; rerun the same command to score the rest"], err[-3000:]
        assert len(committed) == len(set(committed)) < len(rows)  # stopped mid-way, no id twice
        for path, data in kept.items():  # the earlier run's parts are untouched
            assert open(path, "rb").read() == data
        kept.update({p: open(p, "rb").read() for p in output.part_files(str(out))})
    missing = len(rows) - len(committed)
    done = subprocess.run(cmd, capture_output=True, env=env, text=True, timeout=1800)
    assert done.returncode == 0 and f"zsnli-batch: {missing} rows scored" in done.stdout, done.stderr[-3000:]
    ids = pads.dataset(str(out), format="parquet").to_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(r["id"] for r in rows)  # every id exactly once


def test_a_stop_lets_the_pipeline_thread_close_its_iterator_before_ray_goes():
    """The iterator's own cleanup (Ray Data shuts its executor down there) runs before `Stopped` is raised,
    so ``ray.shutdown`` never pulls Ray out from under it (CI printed Ray's tracebacks after a Ctrl-C)."""
    stop, closed = threading.Event(), []

    def batches():
        try:
            yield pa.table({"id": [1]})
            time.sleep(0.5)  # the next batch is on its way when the stop comes
            yield pa.table({"id": [2]})
            time.sleep(60)
        finally:
            closed.append(time.monotonic())

    with pytest.raises(batch_ray.Stopped):
        batch_ray.commit_stream(batches, _Parts(), batch_ray.Progress(lambda: (0, 0)), stop, _never_stalled,
                                lambda n: stop.set())
    assert closed, "Stopped was raised while the pipeline's iterator was still open"


def _raise_in(filename: str):
    """An exception whose traceback's last frame is in ``filename``."""
    code = compile("def f():\n    raise RuntimeError('Ray is not initialized')\n", filename, "exec")
    space: dict = {}
    exec(code, space)
    try:
        space["f"]()
    except RuntimeError as exc:
        return exc


def test_ray_teardown_after_a_stop_prints_nothing_from_ray_and_keeps_everything_else(capsys):
    import logging
    import types

    ray_file = os.path.join(os.path.dirname(ray.__file__), "data", "iterator.py")
    seen = []
    record = seen.append  # one bound method: each ``seen.append`` is a new object
    previous = sys.unraisablehook
    sys.unraisablehook = record
    data_logger = logging.getLogger("ray.data._internal.stats")
    data_logger.setLevel(logging.INFO)  # Ray Data sets its own levels: "ray" alone does not reach it
    try:
        restore = batch_ray.quiet_ray_teardown()
        try:
            assert not data_logger.isEnabledFor(logging.WARNING)
            for exc in (_raise_in(ray_file), _raise_in("/elsewhere/ours.py")):
                sys.unraisablehook(types.SimpleNamespace(exc_type=type(exc), exc_value=exc,
                                                         exc_traceback=exc.__traceback__, err_msg=None, object=None))
        finally:
            restore()
        assert data_logger.level == logging.INFO and sys.unraisablehook is record
    finally:
        sys.unraisablehook = previous
    assert [u.exc_traceback.tb_next.tb_frame.f_code.co_filename for u in seen] == ["/elsewhere/ours.py"]


def test_parts_follow_batch_rows():
    """Each part is exactly ``--batch-rows`` rows (the last fewer), whatever blocks Ray made: blocks of 100
    rows used to come back whole at ``--batch-rows 64`` (parts [64, 100, 100, 36]), so a stop could lose
    more than the flag said. Here a real local Ray's dataset of 100-row blocks is re-cut into 64-row parts."""
    assert not ray.is_initialized()
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        blocks = [pa.table({"id": list(range(start, start + 100))}) for start in (0, 100, 200)]
        ds = ray.data.from_arrow(blocks).map_batches(lambda t: t, batch_format="pyarrow", batch_size=None)
        parts = _Parts()
        batch_ray.commit_stream(lambda: batch_ray.scored_batches(ds, 64), parts, batch_ray.Progress(lambda: (0, 0)),
                                threading.Event(), _never_stalled, lambda n: None)
    finally:
        ray.shutdown()
    assert [t.num_rows for t in parts.tables] == [64, 64, 64, 64, 44]
    assert sorted(i for t in parts.tables for i in t["id"].to_pylist()) == list(range(300))


BAD_HTTP_SETTINGS = {"ZSNLI_API_KEY": "two words", "ZSNLI_PUBLIC_URL": "ftp://x", "ZSNLI_FORWARDED_ALLOW_IPS": "not-an-ip",
                     "ZSNLI_READ_TIMEOUT_S": "-1", "ZSNLI_MAX_CONNECTIONS": "0", "ZSNLI_KEEP_ALIVE_S": "-5",
                     "ZSNLI_MAX_BODY_BYTES": "0", "ZSNLI_MAX_BATCH_ITEMS": "0", "ZSNLI_ALLOWED_HOSTS": "a b",
                     "ZSNLI_ALLOWED_ORIGINS": "null"}


@pytest.mark.parametrize("name, value", sorted(BAD_HTTP_SETTINGS.items()))
def test_a_server_only_setting_the_job_never_uses_is_not_refused(small_model, tmp_path, monkeypatch, name, value):
    """Issue 57: an invalid ZSNLI_API_KEY (or any setting only the HTTP server reads) stopped zsnli-batch."""
    from zsnli.batch.cli import HTTP_ONLY_SETTINGS, parse_job
    from zsnli.config import Settings, SettingsError

    assert {Settings.env_name(n) for n in HTTP_ONLY_SETTINGS} == set(BAD_HTTP_SETTINGS)
    with pytest.raises(SettingsError):  # the server refuses the value
        Settings.from_env({name: value})
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in _rows(4)))
    monkeypatch.setenv(name, value)
    job = parse_job([str(source), "--output", str(tmp_path / "out"), "--model-dir", str(small_model),
                     "--labels-col", "labels"])
    assert job.settings.model_dir == str(small_model)
    monkeypatch.setenv("ZSNLI_MAX_LENGTH", "many")  # a setting the job does read is still checked
    with pytest.raises(UsageError, match="ZSNLI_MAX_LENGTH"):
        parse_job([str(source), "--output", str(tmp_path / "out"), "--model-dir", str(small_model),
                   "--labels-col", "labels"])
