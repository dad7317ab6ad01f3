"""zsnli-batch on a 2-CPU machine (issue 22, item 11): the local Ray's sizing, a first run, a resume and a
rerun each finish (they used to wait forever with 3 actors on 4 logical CPUs); a stalled run fails in one
line; ids missing or repeated are refused before Ray. Ray is started by zsnli-batch itself here."""

from __future__ import annotations

import json
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
    return Job("in.jsonl", "out", "jsonl", ColumnSpec(), None, actors, cpus_per_actor, 8, 16, None, stall)


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


def test_a_stalled_pipeline_fails_in_one_line_within_the_timeout():
    release = threading.Event()
    progress = batch_ray.Progress(lambda: (0, 0), every_s=30, stall_s=0.6, log=False)
    t0 = time.monotonic()
    with pytest.raises(batch_ray.Stalled) as err, progress:
        batch_ray._watched(lambda: release.wait(60), progress, job(actors=1, stall=0.6), 1)
    release.set()
    assert time.monotonic() - t0 < 5
    assert str(err.value).startswith("no row scored in the last 0.6 s") and "\n" not in str(err.value)


def test_progress_that_moves_never_stalls():
    count = iter(range(1000))
    progress = batch_ray.Progress(lambda: (0, next(count)), every_s=30, stall_s=0.6, log=False)  # events only
    with progress:
        batch_ray._watched(lambda: time.sleep(1.5), progress, job(actors=1, stall=0.6), 1)
    assert not progress.stalled


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, bert_dir):
    return verified_model_copy(bert_dir, tmp_path_factory.mktemp("small"))


def _rows(n=40):
    return [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in corpus_documents(n, seed=5)]


def _run(model, source, output, *extra) -> int:
    return main([str(source), "--output", str(output), "--model-dir", str(model), "--labels-col", "labels",
                 "--batch-rows", "8", "--rows-per-file", "16", "--stall-timeout", "1800", *extra])


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
    assert _run(small_model, full, out) == 0  # rerun of a finished output: a no-op
    assert "0 rows scored" in capsys.readouterr().out
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
