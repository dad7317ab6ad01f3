"""Data-parallel training on CPU: `train.py --preset tiny` under torchrun with 2 gloo processes.

The 2-process run must be the single-process run (`tiny_run`, same global
batch of 4) split in two: world size 2 with 2 examples per process, the same
optimiser steps, the same per-step losses and gradient norms up to float
noise (a doubled loss is transformers' world-size scaling of a mean loss),
one writer of the model and manifests, the data built and tokenised by
rank 0 only. Plus the launch checks (one line, exit 2) and the joint
time-budget stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zsnli.training.data_parallel import Launch, LaunchError, any_rank, launch_from_env, per_device_batch, replicas
from zsnli.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]

LOSS_TOLERANCE = 1e-5
"""Float noise between a batch of 4 and two batches of 2 (summation order, padding to 8): measured 1.2e-7."""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "ACCELERATE_USE_CPU")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def _step_log(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "loss_log.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def _rank_logs(log_dir: Path, name: str) -> dict[int, str]:
    """torchrun --redirects 3 output: ``<log_dir>/<run id>/attempt_0/<local rank>/<name>.log``."""
    return {int(p.parent.name): p.read_text() for p in log_dir.glob(f"**/{name}.log")}


@pytest.fixture(scope="module")
def ddp_run(tiny_run, tmp_path_factory):
    """The tiny preset under ``torchrun --standalone --nproc_per_node 2`` (gloo), on the same base and data as `tiny_run`."""
    root = tmp_path_factory.mktemp("ddp_run")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--log-dir", str(root / "logs"), "--redirects", "3",
           str(ROOT / "train.py"), "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), "--model-dir", str(root / "out" / "model"),
           "--output-dir", str(root / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
                            start_new_session=True)
    try:
        proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks: nothing left running
        proc.communicate()
        pytest.fail(f"torchrun did not finish in 240 s; rank logs: {_rank_logs(root / 'logs', 'stderr')}")
    stdout, stderr = _rank_logs(root / "logs", "stdout"), _rank_logs(root / "logs", "stderr")
    assert proc.returncode == 0, {r: e[-2000:] for r, e in stderr.items()}
    return {"root": root, "stdout": stdout, "stderr": stderr}


def test_two_processes_train_the_single_process_run(tiny_run, ddp_run):
    single = load_manifest(tiny_run["out"] / "training_manifest.json")
    ddp = load_manifest(ddp_run["root"] / "out" / "training_manifest.json")
    assert single["training"]["world_size"] == 1 and ddp["training"]["world_size"] == 2
    assert ddp["hyperparameters"]["batch_size"] == single["hyperparameters"]["batch_size"] == 4  # the global batch
    assert (single["training"]["per_device_batch_size"], ddp["training"]["per_device_batch_size"]) == (4, 2)
    assert ddp["training"]["steps"] == single["training"]["steps"] == 4
    assert ddp["training"]["epochs"] == pytest.approx(single["training"]["epochs"])  # same examples per step
    assert ddp["data"] == single["data"]

    s_log, d_log = _step_log(tiny_run["root"] / "run"), _step_log(ddp_run["root"] / "run")
    print("\nstep  loss 1 process (batch 4)  loss 2 processes (2 + 2)  grad norm 1 / 2")
    for s, d in zip(s_log, d_log):
        print(f"{s['step']:4d}  {s['loss']:.9f}  {d['loss']:.9f}  {s['grad_norm']:.6f} / {d['grad_norm']:.6f}")
    assert [r["step"] for r in d_log] == [r["step"] for r in s_log] == [1, 2, 3, 4]
    for s, d in zip(s_log, d_log):
        assert abs(d["loss"] - s["loss"]) <= LOSS_TOLERANCE, (s, d)
        assert d["grad_norm"] == pytest.approx(s["grad_norm"], rel=LOSS_TOLERANCE), (s, d)
    assert ddp["training"]["validation"]["eval_mean_accuracy"] == single["training"]["validation"]["eval_mean_accuracy"]


def test_rank_zero_alone_builds_the_data_and_writes(ddp_run):
    out, stdout, stderr = ddp_run["root"] / "out", ddp_run["stdout"], ddp_run["stderr"]
    assert sorted(stdout) == [0, 1]
    writers = [rank for rank, text in stdout.items() if '"world_size": 2' in text]  # `_train` prints the manifest's figures
    assert writers == [0]
    assert "zsnli.training.trainer: data:" in stderr[0] and "zsnli.training.trainer: data:" not in stderr[1]
    assert "tokenize" in stderr[0] and "tokenize" not in stderr[1]
    assert sorted(p.name for p in out.iterdir()) == ["data_sources.json", "model", "training_manifest.json"]
    assert sorted(p.name for p in (ddp_run["root"] / "run").iterdir() if not p.name.startswith("checkpoint-")) == [
        "holdout.jsonl", "loss_log.jsonl", "run_settings.json"]  # the shared tokenised copy is gone


@pytest.mark.parametrize("env, flags, names", [
    ({"WORLD_SIZE": "3", "RANK": "0"}, [], ["the tiny preset's batch 4", "WORLD_SIZE=3"]),
    ({"WORLD_SIZE": "4", "RANK": "1"}, ["--batch-size", "6"], ["--batch-size 6", "WORLD_SIZE=4", "multiple of 4"]),
    ({"WORLD_SIZE": "two"}, [], ["WORLD_SIZE='two'"]),
    ({"WORLD_SIZE": "2", "RANK": "2"}, [], ["RANK=2", "WORLD_SIZE=2"]),
])
def test_launch_mistakes_are_one_line_exit_2(tiny_run, env, flags, names):
    cmd = [sys.executable, str(ROOT / "train.py"), "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120, env=_env(**env))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("train.py train: error: ")
    for name in names:
        assert name in proc.stderr


@pytest.mark.parametrize("command", [["calibrate"], ["evaluate", "--update-manifest"]])
def test_other_commands_run_in_rank_zero_only(tiny_run, tmp_path, command):
    """Under a launcher, ranks > 0 of calibrate / evaluate return 0 at once: one writer of calibration.json."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(tiny_run["out"], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    cmd = [sys.executable, str(ROOT / "train.py"), *command, "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), "--model-dir", str(out / "model"), "--out", str(tmp_path / "r.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=_env(WORLD_SIZE="2", RANK="1", LOCAL_RANK="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "" and "runs in rank 0 only" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not (tmp_path / "r.json").exists()


def test_launch_and_batch_split_arithmetic():
    assert launch_from_env({}) == Launch(1, 0, 0)
    assert launch_from_env({"WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "5"}) == Launch(8, 5, 5)
    with pytest.raises(LaunchError, match="LOCAL_RANK"):
        launch_from_env({"WORLD_SIZE": "2", "LOCAL_RANK": "-1"})
    assert per_device_batch(32, 8) == 4 and per_device_batch(32, 1) == 32
    with pytest.raises(LaunchError, match="32 examples does not split evenly over 3"):
        per_device_batch(32, 3)
    assert replicas(Launch(8, 0, 0), cuda_devices=1) == 8  # torchrun: one device per process
    assert replicas(Launch(), cuda_devices=4) == 4  # one process, DataParallel over every visible GPU
    assert replicas(Launch(), cuda_devices=0) == 1
    assert any_rank(True) is True and any_rank(False) is False  # no process group: the local flag


def _any_rank_worker(rank: int, store: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    Path(out_dir, f"rank{rank}").write_text(f"{any_rank(rank == 1)} {any_rank(False)}")
    dist.destroy_process_group()


def test_any_rank_is_one_decision_for_all_ranks(tmp_path):
    """Two gloo processes: a flag raised on rank 1 only is true on both; false everywhere stays false.

    Forked from this process (torch already imported), so the check costs no fresh interpreter.
    """
    import torch.multiprocessing as mp

    mp.start_processes(_any_rank_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2,
                       start_method="fork")
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["True False", "True False"]


@pytest.mark.parametrize("over_here, over_elsewhere", [(False, True), (True, False), (False, False)])
def test_time_budget_stop_follows_the_joint_decision(monkeypatch, over_here, over_elsewhere):
    """The budget callback stops (saving and evaluating first) when ANY rank is over budget, not only this one."""
    import time

    from transformers import TrainerControl, TrainerState

    from zsnli.training import callbacks
    from zsnli.training.presets import get_preset

    asked = []

    def fake_any_rank(flag, device=None):  # what the all-reduce returns when another rank is (not) over budget
        asked.append((flag, device))
        return flag or over_elsewhere

    monkeypatch.setattr(callbacks, "any_rank", fake_any_rank)
    preset = get_preset("tiny", "unused", "unused").with_overrides(time_budget_s=60.0)
    started = time.time() - (120.0 if over_here else 0.0)
    budget = callbacks.trainer_callbacks(preset, started, reset_best=False)[0]
    control = budget.on_step_end(type("Args", (), {"device": "cpu"})(), TrainerState(), TrainerControl())
    assert asked == [(over_here, "cpu")]
    stop = over_here or over_elsewhere
    assert (control.should_training_stop, control.should_save, control.should_evaluate) == (stop, stop, stop)
