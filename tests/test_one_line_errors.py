"""Issue 48: every command-line error and start-up refusal is one line: a JSON file nested deeper than Python can
walk, a missing or unreadable file, a missing model directory (no settings dump before the refusal)."""

from __future__ import annotations

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
    assert len(err) == 1 and err[0].startswith("verify-receipt: ") and "Error" not in err[0], err


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
