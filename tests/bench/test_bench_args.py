"""The argument checks every bench command shares (`zsnli.bench.bench_args`): a bad ``--model-dir``, ``--device``,
``--dtype``, ``--repo-root`` or examples file is one line naming the flag, exit 2, before any work."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from bench_support import refused

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "dev" / "smoke.jsonl")


def _main(module: str):
    return importlib.import_module(module).main


# every bench command with a --model-dir (or --spawn-model-dir), and the other flags it needs to get that far
MODEL_DIR_COMMANDS = [
    ("zsnli.bench.side_by_side_cli", "--model-dir", ["--examples", SMOKE, "--calibration", "none"]),
    ("zsnli.bench.throughput_gate", "--model-dir", ["--dry-run"]),
    ("zsnli.bench.speed_rounds", "--model-dir", ["--examples", SMOKE]),
    ("zsnli.bench.pipeline_arm", "--model-dir", ["--examples", SMOKE, "--out", "{tmp}/o.json"]),
    ("zsnli.bench.accelerator_padding", "--model-dir", []),
    ("zsnli.bench.bakeoff_priority", "--model-dir", []),
    ("zsnli.bench.batch_invariance", "--model-dir", ["--examples", SMOKE]),
    ("zsnli.bench.fair_share", "--model-dir", []),
    ("zsnli.bench.read_routes", "--model-dir", []),
    ("zsnli.bench.idle_clients", "--model-dir", []),
    ("zsnli.bench.overload", "--spawn-model-dir", []),
]


@pytest.mark.parametrize("module, flag, extra", MODEL_DIR_COMMANDS, ids=[m[0] for m in MODEL_DIR_COMMANDS])
@pytest.mark.parametrize("what", ["missing", "a file", "no config.json"])
def test_a_model_dir_that_is_none_is_one_line_before_any_work(tmp_path, capsys, module, flag, extra, what):
    """``python -m zsnli.bench --model-dir X`` (X missing, a file, a folder without config.json) dropped arm (d),
    measured the matmul rate, then ended in a long Hugging Face traceback; several commands checked only that
    the folder exists, or nothing."""
    given = {"missing": tmp_path / "nope", "a file": tmp_path / "file", "no config.json": tmp_path / "empty"}[what]
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    argv = [flag, str(given), *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    line = refused(capsys, lambda: _main(module)(argv))
    reason = {"missing": "no such directory", "a file": "a file, not a directory",
              "no config.json": "not a model directory (no config.json)"}[what]
    assert f"error: {flag} {given}: {reason}" in line, line


DEVICE_COMMANDS = [("zsnli.bench.side_by_side_cli", ["--examples", SMOKE, "--calibration", "none"]),
                   ("zsnli.bench.throughput_gate", ["--dry-run"]),
                   ("zsnli.bench.pipeline_arm", ["--model-dir", "model", "--examples", SMOKE, "--out", "{tmp}/o"])]


@pytest.mark.parametrize("module, extra", DEVICE_COMMANDS, ids=[m[0] for m in DEVICE_COMMANDS])
@pytest.mark.parametrize("device", ["foo", "cuda:x", "gpu", "cuda:", ""])
def test_a_device_the_server_does_not_take_is_refused_when_the_flags_parse(tmp_path, capsys, module, extra, device):
    """``--device foo`` / ``cuda:x`` was a RuntimeError traceback (``python -m zsnli.bench``), or not checked at
    all (throughput_gate, pipeline_arm)."""
    argv = ["--device", device, *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    line = refused(capsys, lambda: _main(module)(argv))
    assert "argument --device: expected cpu, cuda, cuda:N" in line and repr(device) in line, line


@pytest.mark.parametrize("module, extra", DEVICE_COMMANDS[1:], ids=[m[0] for m in DEVICE_COMMANDS[1:]])
def test_a_dtype_the_server_does_not_take_is_refused_when_the_flags_parse(tmp_path, capsys, module, extra):
    argv = ["--dtype", "foo", *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    line = refused(capsys, lambda: _main(module)(argv))
    assert "argument --dtype: expected one of float32, fp32, bfloat16, bf16" in line and "'foo'" in line, line


def test_devices_and_dtypes_the_server_takes_pass_as_torch_names():
    from zsnli.bench.bench_args import device_name, dtype_name
    from zsnli.config import DTYPES

    assert [device_name(d) for d in ("cpu", "cuda", "cuda:0", "cuda:12", "mps")] == ["cpu", "cuda", "cuda:0",
                                                                                     "cuda:12", "mps"]
    import torch

    for name in DTYPES + ("BF16", "torch.float16", "Float32"):  # every ZSNLI_DTYPE name: one torch dtype
        assert isinstance(getattr(torch, dtype_name(name)), torch.dtype), name
    assert dtype_name("bf16") == "bfloat16" and dtype_name("half") == "float16"


REPO_ROOT_COMMANDS = [("zsnli.bench.side_by_side_cli", ["--examples", SMOKE, "--calibration", "none"]),
                      ("zsnli.bench.throughput_gate", ["--tiny", "--dry-run"]),
                      ("zsnli.bench.speed_rounds", ["--examples", SMOKE])]


@pytest.mark.parametrize("module, extra", REPO_ROOT_COMMANDS, ids=[m[0] for m in REPO_ROOT_COMMANDS])
def test_a_repo_root_that_is_no_checkout_is_refused_before_any_server_starts(tmp_path, capsys, module, extra):
    """``speed_rounds --repo-root /nope`` was a ServerError traceback (exit 1) once the rounds began;
    ``python -m zsnli.bench --repo-root /nope`` started work."""
    (tmp_path / "file").write_text("x")
    for root, reason in ((tmp_path / "nope", "no such directory"), (tmp_path / "file", "a file, not a directory"),
                         (tmp_path, "not a zsnli checkout (neither serve.sh nor server.py in it)")):
        line = refused(capsys, lambda root=root: _main(module)(["--repo-root", str(root), *extra]))
        assert f"error: --repo-root {root}: {reason}" in line, line


@pytest.mark.parametrize("module, extra", [("zsnli.bench.side_by_side_cli", ["--calibration", "none"]),
                                           ("zsnli.bench.throughput_gate", ["--tiny", "--dry-run"]),
                                           ("zsnli.bench.batch_invariance", [])])
def test_an_examples_file_without_examples_is_a_usage_error(tmp_path, capsys, module, extra):
    """``python -m zsnli.bench --examples empty.json`` and the throughput gate ended with exit 1 and "no examples"
    (after the matmul rate, or the gate's servers' plan): a user mistake, exit 2, before any work."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = refused(capsys, lambda: _main(module)(["--examples", str(empty), *extra]))
    assert f"error: --examples: {empty}: no examples" in line, line
