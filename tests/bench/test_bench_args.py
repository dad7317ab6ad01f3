"""The argument checks every bench command shares (`zsnli.bench.bench_args`): a bad ``--model-dir``, ``--device``,
``--dtype``, ``--repo-root`` or examples file is one line naming the flag, exit 2, before any work."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from bench_support import MODEL_DIR_COMMANDS, SMOKE, bench_parsers, refused

REPO = Path(__file__).resolve().parents[2]


def _main(module: str):
    return importlib.import_module(module).main


MODEL_FOLDER_DESTS = ("model_dir", "embedding_dir")
"""An option names a model folder when its destination ends with one of these."""
#: what each kind of wrong folder is called (`zsnli.training.usage`); the last two only where an NLI model is needed
NOT_A_MODEL = {"missing": "no such directory", "a file": "a file, not a directory",
               "no config.json": "not a model directory (no config.json)",
               "a sentence encoder": "this is a sentence encoder", "no entailment label": "not a 3-way NLI model"}


def _wrong_folder(tmp_path: Path, what: str) -> Path:
    """A path under ``tmp_path`` that is what `NOT_A_MODEL` names ``what``."""
    path = tmp_path / what.replace(" ", "-")
    if what == "a file":
        path.write_text("x")
    elif what != "missing":
        path.mkdir()
    if what == "a sentence encoder":
        (path / "config.json").write_text('{"model_type": "bert"}')
        (path / "sentence_bert_config.json").write_text("{}")
    elif what == "no entailment label":
        (path / "config.json").write_text('{"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}')
    return path


def test_every_flag_that_names_a_model_folder_is_checked_here():
    """`MODEL_DIR_COMMANDS` holds every option of every bench command that names a model folder: bakeoff_costs,
    cost_profile, doc_figures, training_speed and ``python -m zsnli.bench --embedding-dir`` were missing (each said
    "no config.json", "not found" or "no such directory" in its own words, or started a server on nothing)."""
    flags = {(f"zsnli.bench.{name}", a.option_strings[0]) for name, parser in bench_parsers().items() if parser
             for a in parser._actions if a.option_strings and a.dest.endswith(MODEL_FOLDER_DESTS)}
    assert flags and flags == {(module, flag) for module, flag, _, _ in MODEL_DIR_COMMANDS}


@pytest.mark.parametrize("module, flag, extra, what", [
    (module, flag, extra, what) for module, flag, extra, nli in MODEL_DIR_COMMANDS
    for what in list(NOT_A_MODEL)[: None if nli else 3]], ids=lambda v: v if isinstance(v, str) else "")
def test_a_model_dir_that_is_none_is_one_line_before_any_work(tmp_path, capsys, module, flag, extra, what):
    """``python -m zsnli.bench --model-dir X`` (X missing, a file, a folder without config.json) dropped arm (d),
    measured the matmul rate, then ended in a long Hugging Face traceback; several commands checked only that
    the folder exists, or nothing. Each is now `zsnli.training.usage`'s one line, exit 2: for the NLI model also
    a sentence encoder's folder and a head without an entailment label (the server refused them once started)."""
    given = _wrong_folder(tmp_path, what)
    argv = [flag, str(given), *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    line = refused(capsys, lambda: _main(module)(argv))
    assert f"error: {flag} {given}: {NOT_A_MODEL[what]}" in line, line


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


@pytest.mark.parametrize("module, extra", DEVICE_COMMANDS, ids=[m[0] for m in DEVICE_COMMANDS])
def test_a_device_this_torch_cannot_use_is_refused_before_any_work(tmp_path, capsys, module, extra):
    """``--device cuda`` on a machine without a GPU passed the form check, then failed once a server or the pipeline
    loaded the model (the server's refusal, or torch's traceback); now `zsnli.runtime.devices.device_problem`'s line,
    the server's own check, exit 2."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    argv = ["--device", "cuda", *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    line = refused(capsys, lambda: _main(module)(argv))
    assert "error: --device cuda but CUDA is not available (torch " in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "2.5"])
@pytest.mark.parametrize("name", ["ZSNLI_BENCH_DOCS", "ZSNLI_BENCH_WARMUP", "ZSNLI_BENCH_CONCURRENCY"])
def test_a_gate_count_from_the_environment_that_is_no_count_is_one_line(capsys, monkeypatch, name, value):
    """``ZSNLI_BENCH_DOCS=abc`` was a ValueError traceback from the gate's parse; warm-ups may be 0, the others not."""
    from zsnli.bench.throughput_gate import parse_args

    if name == "ZSNLI_BENCH_WARMUP" and value == "0":
        monkeypatch.setenv(name, value)
        assert parse_args(["--tiny", "--dry-run"]).warmup == 0
        return
    monkeypatch.setenv(name, value)
    line = refused(capsys, lambda: parse_args(["--tiny", "--dry-run"]))
    assert f"error: {name}={value!r}: expected a whole number of at least " in line, line
    monkeypatch.setenv(name, "3")
    assert getattr(parse_args(["--tiny", "--dry-run"]), name.rsplit("_", 1)[1].lower()) == 3


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


@pytest.mark.parametrize("module, flag, extra", [("zsnli.bench.side_by_side_cli", "--examples", ["--calibration", "none"]),
                                                 ("zsnli.bench.side_by_side_cli", "--calibration", ["--examples", SMOKE]),
                                                 ("zsnli.bench.throughput_gate", "--examples", ["--tiny", "--dry-run"]),
                                                 ("zsnli.bench.batch_invariance", "--examples", []),
                                                 ("zsnli.bench.random_models", "--examples",
                                                  ["--arch", "deberta-tiny"])])
def test_a_file_flag_given_a_directory_calls_it_a_directory(tmp_path, capsys, module, flag, extra):
    """``python -m zsnli.bench --examples DIR`` said "no such file DIR", which sends a user looking for a missing
    file; each file flag calls a directory a directory and a missing path missing, in one line naming the flag."""
    if module.endswith("random_models"):
        extra = [*extra, "--out", str(tmp_path / "m")]
    for path, reason in ((tmp_path, "a directory, not a file"), (tmp_path / "none.jsonl", "no such file")):
        main = _main(module)
        if module.endswith("random_models"):  # returns 2 and prints the line itself
            assert main([flag, str(path), *extra]) == 2
            line = capsys.readouterr().err.strip()
        else:
            line = refused(capsys, lambda path=path: main([flag, str(path), *extra]))
        assert line.count("\n") == 0 and f"{flag}" in line and f"{path}: {reason}" in line, line
