"""zsnli-batch on Ray Data (issue 17, part 2): 60 rows, the tiny BERT, 2 actors, one local Ray per module.

Every id exactly once, probabilities equal to ``POST /classify``'s, an actor killed mid-run,
a resumed run adding only the missing rows, and the one-line refusals (exit 2) before Ray runs.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest
from conftest import cached_loader, corpus_documents, make_settings, running_app, verified_model_copy

ray = pytest.importorskip("ray", reason="the [batch] extra (Ray Data) is not installed")

import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from zsnli.serving.app import create_app  # noqa: E402
from zsnli.batch.cli import main  # noqa: E402
from zsnli.batch.predictor import FAULT_MARKER_ENV  # noqa: E402
from zsnli.manifest import sha256_file  # noqa: E402

TEMPLATE = "This text is about {}."
N_ROWS = 60


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray for the module: 2 actors + read/write/checkpoint-filter tasks. Workers' output is not
    forwarded to this process (``log_to_driver=False``): an actor of one test finishing late printed its
    "INFO zsnli: stopped" into the next test's stderr, which checks the command's own lines (CI, stop 55)."""
    ray.init(num_cpus=5, num_gpus=0, include_dashboard=False, logging_level="warning", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def verified_model(tmp_path_factory, bert_dir):
    """The tiny BERT with a training manifest and a content-free calibration beside it."""
    return verified_model_copy(bert_dir, tmp_path_factory.mktemp("batchmodel"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """60 rows (JSONL and Parquet): per-row labels, one row without text, two with a label too long."""
    rows = [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in corpus_documents(N_ROWS, seed=3)]
    rows[7]["text"] = None
    where = tmp_path_factory.mktemp("corpus")
    jsonl = where / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = where / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    return rows, jsonl, parquet


def run_batch(model, source, output, *extra) -> int:
    return main([str(source), "--output", str(output), "--model-dir", str(model), "--labels-col", "labels",
                 "--hypothesis-template", TEMPLATE, "--actors", "2", "--batch-rows", "8", *extra])


def read_output(output) -> dict:
    table = pads.dataset(str(output), format="parquet").to_table()
    return {r["id"]: r for r in table.to_pylist()}


async def through_http(model, rows) -> list:
    app = create_app(make_settings(model), loader=cached_loader)
    out = []
    async with running_app(app) as client:
        for r in rows:
            resp = await client.post("/classify", json={"text": r["text"], "labels": r["labels"],
                                                        "hypothesis_template": TEMPLATE})
            out.append(resp.json())
        health = (await client.get("/health")).json()
    return out, health


def test_every_id_once_and_same_probabilities_as_classify(ray_cluster, verified_model, corpus, tmp_path, capsys):
    rows, jsonl, _ = corpus
    assert run_batch(verified_model, jsonl, tmp_path / "out") == 0
    assert "60 rows scored" in capsys.readouterr().out
    table = pads.dataset(str(tmp_path / "out"), format="parquet").to_table()
    assert sorted(table.column("id").to_pylist()) == sorted(r["id"] for r in rows)  # each exactly once
    got = read_output(tmp_path / "out")
    answers, health = asyncio.run(through_http(verified_model, [r for r in rows if r["text"] is not None]))
    max_dp, errors = 0.0, 0
    for r, answer in zip([r for r in rows if r["text"] is not None], answers):
        out = got[r["id"]]
        assert out["model_sha256"] == health["model_sha256"] and health["verified"]
        assert out["calibration_sha256"] == sha256_file(verified_model.parent / "calibration.json")
        if "probabilities" not in answer:
            assert out["probabilities"] is None and out["error"].startswith(answer["error_type"]), r["id"]
            errors += 1
            continue
        assert out["error"] is None and int(np.argmax(out["probabilities"])) == int(np.argmax(answer["probabilities"]))
        assert out["top_label"] == r["labels"][int(np.argmax(answer["probabilities"]))]
        max_dp = max(max_dp, float(np.max(np.abs(np.subtract(out["probabilities"], answer["probabilities"])))))
    assert max_dp <= 1e-6 and errors >= 1
    assert got[rows[7]["id"]]["error"] == "text is missing"  # not scored, not dropped


def test_a_worker_killed_mid_run_still_gives_full_output(ray_cluster, verified_model, corpus, tmp_path, monkeypatch):
    rows, _, parquet = corpus
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_MARKER_ENV, str(marker))
    assert run_batch(verified_model, parquet, tmp_path / "out") == 0
    assert marker.exists()  # an actor did exit mid-run
    ids = pads.dataset(str(tmp_path / "out"), format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(r["id"] for r in rows)


def test_resumed_run_adds_only_the_missing_rows(ray_cluster, verified_model, corpus, tmp_path, capsys):
    rows, jsonl, _ = corpus
    first = tmp_path / "first.jsonl"
    first.write_text("".join(jsonl.read_text().splitlines(keepends=True)[:25]))
    out = tmp_path / "out"
    assert run_batch(verified_model, first, out) == 0
    before = {f: f.stat().st_mtime_ns for f in out.glob("*.parquet")}
    capsys.readouterr()
    assert run_batch(verified_model, jsonl, out) == 0
    assert "35 rows scored" in capsys.readouterr().out
    assert all(f.stat().st_mtime_ns == t for f, t in before.items())  # earlier files untouched
    ids = pads.dataset(str(out), format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert run_batch(verified_model, jsonl, out) == 0  # nothing left: a no-op, before Ray is asked anything
    assert f"nothing to do: all {len(rows)} rows" in capsys.readouterr().out


@pytest.mark.parametrize("problem", ["tampered", "no_model"])
def test_bad_model_is_one_line_and_exit_2(verified_model, corpus, tmp_path, capsys, problem):
    _, jsonl, _ = corpus
    model = tmp_path / "model"
    if problem == "tampered":
        shutil.copytree(verified_model, model)
        shutil.copy(verified_model.parent / "training_manifest.json", tmp_path)
        (model / "config.json").write_text((model / "config.json").read_text() + " ")
    capsys.readouterr()  # drop what earlier tests left (a Ray worker's forwarded log line reached this capture once)
    assert run_batch(model, jsonl, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    expected = "model check failed:" if problem == "tampered" else f"--model-dir {model}: not found"
    assert len(err.splitlines()) == 1 and err.startswith(f"zsnli-batch: error: {expected}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, flag", [(["--labels", "a", "b"], "--labels"), (["--text-col", "body"], "--text-col"),
                                         (["--actors", "0"], "--actors")])
def test_flag_mistakes_are_one_line_and_exit_2(verified_model, corpus, tmp_path, capsys, extra, flag):
    _, jsonl, _ = corpus
    try:
        code = run_batch(verified_model, jsonl, tmp_path / "out", *extra)
    except SystemExit as exc:  # a value out of a flag's range is refused by the parser (zsnli.harness.cli)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


def test_a_full_disk_is_one_line_and_keeps_the_committed_rows(ray_cluster, verified_model, corpus, tmp_path,
                                                             monkeypatch, capsys):
    """Issue 48: ENOSPC while writing a part ends the run in one line (exit 1), not a traceback; a rerun with
    space finishes it."""
    import errno

    from zsnli.batch.output import PartWriter

    rows, jsonl, _ = corpus
    real, calls = PartWriter.write, []

    def full_disk(self, table):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "part"))
        return real(self, table)

    monkeypatch.setattr(PartWriter, "write", full_disk)
    capsys.readouterr()
    assert run_batch(verified_model, jsonl, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len([ln for ln in err if "zsnli-batch" in ln]) == 1 and "Traceback" not in "\n".join(err), err
    assert any("No space left on device" in ln and "rerun" in ln for ln in err), err
    monkeypatch.setattr(PartWriter, "write", real)
    assert run_batch(verified_model, jsonl, tmp_path / "out") == 0
    assert sorted(read_output(tmp_path / "out")) == sorted(r["id"] for r in rows)
