"""Issue 39 (B): one ``zsnli-batch`` writer per ``--output`` (an flock on ``<output>/_zsnli-batch.lock``).

Before the lock two runs on one output both succeeded and wrote every row twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import corpus_documents, verified_model_copy

pa = pytest.importorskip("pyarrow")

from zsnli.batch import output  # noqa: E402
from zsnli.batch.cli import LOCKED_EXIT, main  # noqa: E402

HOLD = ("import sys, time; from zsnli.batch.output import lock_output; lock = lock_output(sys.argv[1]); "
        "print('held', flush=True); time.sleep(600)")


def test_a_second_lock_on_one_output_is_refused_and_a_released_one_is_free(tmp_path):
    out = str(tmp_path / "out")
    first = output.lock_output(out)
    with pytest.raises(output.OutputLocked) as caught:
        output.lock_output(out)  # another open file: flock refuses it even in this process
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and out in message and output.LOCK_NAME in message
    assert f"pid {os.getpid()}" in message
    first.release()
    first.release()  # idempotent
    with output.lock_output(out) as again:
        assert again.path.endswith(output.LOCK_NAME)
    assert output.part_files(out) == []  # readers never take the lock file for output
    assert output.lock_output("s3://bucket/out").path is None


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, bert_dir):
    return verified_model_copy(bert_dir, tmp_path_factory.mktemp("small"))


def _run(model, source, out) -> int:
    return main([str(source), "--output", str(out), "--model-dir", str(model), "--labels-col", "labels"])


def test_a_second_run_on_a_held_output_exits_in_one_line_and_a_dead_holder_frees_it(small_model, tmp_path,
                                                                                     capsys):
    rows = [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in corpus_documents(6, seed=5)]
    source, out = tmp_path / "in.jsonl", tmp_path / "out"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(output.Path(output.__file__).parents[2]),
                                                                    os.environ.get("PYTHONPATH", "")] if p)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert _run(small_model, source, out) == LOCKED_EXIT != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("zsnli-batch: error: --output "), err
        assert str(out) in err and output.LOCK_NAME in err and f"pid {holder.pid}" in err
        assert output.part_files(str(out)) == []  # the refused run wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert (out / output.LOCK_NAME).exists()  # the dead run's leftover ...
    writer = output.PartWriter(str(out))  # ... (and an output that already holds every row)
    writer.write(pa.table({"id": [r["id"] for r in rows], "error": pa.array([None] * len(rows), pa.string())}))
    assert _run(small_model, source, out) == 0  # ... holds nothing: the run proceeds
    assert "nothing to do" in capsys.readouterr().out
