"""Issue 48: every command-line error and start-up refusal is one line: a JSON file nested deeper than Python can
walk, a missing or unreadable file, a missing model directory (no settings dump before the refusal)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("shape", ["list", "object", "mixed"])
@pytest.mark.parametrize("depth", [20_000, 100_000])
def test_verify_receipt_of_deeply_nested_json_is_one_line_exit_2(tmp_path, capsys, shape, depth):
    from zsnli.compare.cli import main

    text = {"list": "[" * depth + "]" * depth, "object": '{"a":' * depth + "1" + "}" * depth,
            "mixed": '{"receipt":' + '[{"x":' * (depth // 2) + "0" + "}]" * (depth // 2) + "}"}[shape]
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert main(["verify-receipt", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nested too deeply" in err[0], err


@pytest.mark.parametrize("what", ["missing", "directory", "unreadable key"])
def test_verify_receipt_of_an_unreadable_file_is_one_line_exit_2(tmp_path, capsys, what):
    from zsnli.compare.cli import main

    report = tmp_path / "r.json"
    report.write_text('{"receipt": {"sha256": "00", "signature": "AA=="}}')
    argv = {"missing": [str(tmp_path / "nope.json")], "directory": [str(tmp_path)],
            "unreadable key": [str(report), "--public-key", str(tmp_path / "no-key.pem")]}[what]
    assert main(["verify-receipt", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("validate.py verify-receipt: error: ") and "Error" not in err[0], err
    if what == "directory":  # was "cannot read DIR: Is a directory", as no other command says it (a new-user pass)
        assert err[0] == f"validate.py verify-receipt: error: {tmp_path}: a directory, not a file; give a bake-off JSON report"


@pytest.mark.parametrize("given", [False, True])
def test_a_missing_model_dir_is_the_one_line_the_server_prints(tmp_path, given):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZSNLI_")}
    env.update(PORT="1", ZSNLI_LOG_LEVEL="info")  # a port never bound: the refusal comes first
    if given:
        env["ZSNLI_MODEL_DIR"] = str(tmp_path / "no-model")
    done = subprocess.run([sys.executable, str(ROOT / "server.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 3 and len(lines) == 1, lines
    assert lines[0].startswith("refusing to start: model directory not found") and "ZSNLI_MODEL_DIR" in lines[0]


@pytest.mark.parametrize("setting, needle", [
    ({"ZSNLI_MAX_BATCH_ITEMS": "abc"}, "ZSNLI_MAX_BATCH_ITEMS must be an integer, got 'abc'"),
    ({"ZSNLI_MAX_BACTH_ITEMS": "8"}, "ZSNLI_MAX_BATCH_ITEMS"),  # misspelt: it would leave the setting at its default
    ({"ZSNLI_MODEL_DIR": "no-model"}, "model directory not found"),
    # issue 57, item 10: a failed start-up check too, without uvicorn's start lines before it
    ({"ZSNLI_CALIBRATION_PATH": "/nonexistent/calibration.json"}, "ZSNLI_CALIBRATION_PATH=/nonexistent"),
])
def test_bare_uvicorn_refuses_a_bad_setting_in_one_line_as_server_py_does(tmp_path, setting, needle):
    """``uvicorn server:app`` (docs/deploy.md's bare route) imports server.py: a refused setting was a
    traceback of the import; it is now server.py's own line and exit 3, before anything listens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZSNLI_")}
    env.update(setting)
    done = subprocess.run([sys.executable, "-m", "uvicorn", "server:app", "--port", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 3 and len(lines) == 1, lines
    assert lines[0].startswith("refusing to start: ") and needle in lines[0], lines


def test_a_failing_log_handler_prints_no_traceback_from_a_command_line(capsys):
    """CI (stop 55): ``zsnli-batch`` printed ``--- Logging error ---`` and a traceback above its one-line error when
    one of Ray Data's log handlers failed; every command line drops such a record instead."""
    import logging

    from zsnli.harness.cli import one_line_errors

    closed = io.StringIO()
    closed.close()  # a handler left holding a stream that has since closed
    log = logging.getLogger("zsnli.test.broken")
    log.addHandler(logging.StreamHandler(closed))
    try:
        @one_line_errors("prog")
        def main() -> int:
            log.warning("a record the handler cannot write")
            raise OSError(28, "No space left on device", "/out/part-1")

        assert main() == 1
        err = capsys.readouterr().err
        assert err.strip().splitlines() == ["prog: error: /out/part-1: No space left on device"], err
        assert logging.raiseExceptions  # restored once the command returns
        log.warning("outside a command line: Python's default, the handler's error is reported")
        assert "Logging error" in capsys.readouterr().err
    finally:
        log.handlers.clear()


def _deep_files(tmp_path: Path, depth: int = 50_000) -> tuple[Path, Path]:
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * depth + "]" * depth)
    deep_lines = tmp_path / "deep.jsonl"
    deep_lines.write_text('{"id": "d", "text":' + "[" * depth + "]" * depth + ', "labels": ["a"]}\n')
    return deep_json, deep_lines


@pytest.mark.parametrize("command", ["train.py verify", "zsnli classify", "validate.py compare"])
def test_every_command_line_reads_deep_json_as_one_line(tmp_path, capsys, command, bert_dir):
    from zsnli.cli import main as zsnli_main
    from zsnli.compare.cli import main as validate_main
    from zsnli.train_cli import main as train_main

    deep_json, deep_lines = _deep_files(tmp_path)
    code = {"train.py verify": lambda: train_main(["verify", "--model-dir", str(bert_dir), "--manifest", str(deep_json)]),
            "zsnli classify": lambda: zsnli_main(["classify", "--input", str(deep_lines), "--labels", "a,b",
                                                  "--url", "http://127.0.0.1:9"]),
            "validate.py compare": lambda: validate_main(["compare", "--examples", str(deep_lines)])}[command]()
    out = capsys.readouterr()
    err = [ln for ln in (out.out + out.err).splitlines() if "error" in ln or "Error" in ln or "nested" in ln]
    assert code == 2 and len(err) == 1 and "nested too deeply" in err[0], (out.out, out.err)


@pytest.mark.parametrize("error, code", [(OSError(28, "No space left on device", "/out/part-1.parquet"), 1),
                                         (FileNotFoundError(2, "No such file or directory", "x.json"), 2),
                                         (RecursionError(), 2)])
def test_the_guard_of_every_main_turns_what_reaches_it_into_one_line(capsys, error, code):
    from zsnli.harness.cli import one_line_errors

    @one_line_errors("prog")
    def main(argv=None):
        raise error

    assert main([]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prog: error: ") and "Error" not in err[0], err


def test_ctrl_c_that_reaches_the_guard_is_one_line_and_130(capsys):
    """Ctrl-C in ``train.py``, ``zsnli classify`` (before any answer), ``train.py select``... was a KeyboardInterrupt
    traceback; the guard of every main makes it one line and the shell's 130, after every ``finally`` ran."""
    from zsnli.harness.cli import INTERRUPTED_EXIT, one_line_errors

    ran = []

    @one_line_errors("prog")
    def main(argv=None):
        try:
            raise KeyboardInterrupt
        finally:
            ran.append("cleanup")

    assert main([]) == INTERRUPTED_EXIT == 130 and ran == ["cleanup"]
    assert capsys.readouterr().err == "prog: interrupted (Ctrl-C)\n"
