"""SIGINT and SIGTERM stop every server a command started (`zsnli.harness.server.stops_servers`).

A SIGTERM used to end ``python -m zsnli.bench`` at once and leave its ``python server.py`` running (its own
session, re-parented to pid 1); Ctrl-C cleaned up but printed a traceback. Each command that starts servers is
checked from the source, and two run for real: the bench with the tiny BERT served by ``serve.sh``, and
``validate.py bakeoff`` whose served arm starts its server in a forked child.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_support import _DOCS, examples_file  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
#: modules that start servers without a ``main`` of their own -> the command whose ``main`` runs them
COMMAND_OF = {"zsnli.compare.selfcheck": "zsnli.compare.cli", "zsnli.compare.arms.zero_shot": "zsnli.compare.cli",
              "zsnli.bench.side_by_side": "zsnli.bench.side_by_side_cli"}
STARTERS = {"ServerProcess", "start_server"}


def _server_starters() -> list[str]:
    """Every module (but the harness's own) that imports `ServerProcess` or `start_server`, at any depth."""
    found = []
    for path in sorted((SRC / "zsnli").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if module == "zsnli.harness.server":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.ImportFrom) and (node.module or "").endswith("harness.server")
               and STARTERS & {alias.name for alias in node.names} for node in ast.walk(tree)):
            found.append(module)
    return found


def test_every_command_that_starts_servers_stops_them_on_a_signal():
    starters = _server_starters()
    assert {"zsnli.bench.side_by_side", "zsnli.bench.throughput_gate", "zsnli.compare.selfcheck"} <= set(starters)
    for module in starters:
        command = COMMAND_OF.get(module, module)
        main = getattr(importlib.import_module(command), "main", None)
        assert main is not None, f"{module} starts servers but has no main: add it to COMMAND_OF"
        assert getattr(main, "stops_servers", False), f"{command}.main is not wrapped by stops_servers"


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stop_when_started(cmd: list[str], pid_file: Path, sig: int, cwd: Path) -> tuple[int, str, bool]:
    """Run ``cmd``; once the server it starts wrote ``pid_file``, send ``sig`` (SIGINT to the command's process
    group, as a terminal's Ctrl-C; SIGTERM to the command alone). Returns (exit code, stderr, whether the server
    still ran once the command had exited); the server is killed here after that whatever happened."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHON": sys.executable}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    server_pid = 0
    try:
        deadline = time.monotonic() + 600
        while not (pid_file.is_file() and pid_file.read_text().strip()):
            if proc.poll() is not None:
                pytest.fail(f"exited {proc.returncode} before its server started: {proc.communicate()[1][-3000:]}")
            assert time.monotonic() < deadline, "no server started in 600 s"
            time.sleep(0.05)
        server_pid = int(pid_file.read_text())
        if sig == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        return proc.returncode, err, _running(server_pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if server_pid and _running(server_pid):
            os.killpg(server_pid, signal.SIGKILL)


def _pid_writing_serve_sh(root: Path, pid_file: Path) -> None:
    """``root/serve.sh``: writes its pid, then becomes the checkout's serve.sh (``python server.py``, same pid)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "serve.sh").write_text(f'echo $$ > "{pid_file}"\nexec bash "{REPO / "serve.sh"}" "$@"\n')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_bench_and_its_server_in_one_line(tmp_path, bert_dir, examples_file, sig):
    pid_file = tmp_path / "server.pid"
    _pid_writing_serve_sh(tmp_path / "repo", pid_file)
    cmd = [sys.executable, "-m", "zsnli.bench", "--model-dir", str(bert_dir), "--examples", str(examples_file),
           "--docs", "2", "--batch-sizes", "none", "--concurrency", "1", "--warmup", "0", "--calibration", "none",
           "--matmul-n", "64", "--matmul-seconds", "0.05", "--no-progress", "--skip-manifest-check",
           "--repo-root", str(tmp_path / "repo"), "--threads", "1"]
    code, err, outlived = _stop_when_started(cmd, pid_file, sig, tmp_path)
    name = signal.Signals(sig).name
    assert code == 128 + sig, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"python -m zsnli.bench: stopped by {name}; every server it started is " \
                                           "stopped"
    assert not outlived, "the server outlived the bench"


def test_sigterm_stops_the_server_of_a_bakeoffs_forked_served_arm(tmp_path):
    """The served arm starts its server in the arm's forked child; the harness's SIGTERM reaches the child as
    SIGTERM (no longer SIGKILL), whose unwinding stops that server. (The bench's documents without the blank
    text, which a bake-off refuses as POST /v1/bakeoff does.)"""
    docs_file = tmp_path / "ex.jsonl"
    docs_file.write_text("".join(json.dumps(d) + "\n" for d in _DOCS if d["text"].strip()), encoding="utf-8")
    pid_file = tmp_path / "server.pid"
    never_healthy = f"bash -c 'echo $$ > {pid_file}; exec sleep 600'"
    (tmp_path / "model").mkdir()
    suite = tmp_path / "suite.toml"
    suite.write_text(f'name = "t"\nexamples = "{docs_file}"\n\n[[arms]]\nname = "zsnli"\ntype = "served"\n'
                     f'model_dir = "model"\nserve_cmd = {json.dumps(never_healthy)}\n')
    cmd = [sys.executable, str(REPO / "validate.py"), "bakeoff", "--suite", str(suite), "--root", str(tmp_path),
           "--report", str(tmp_path / "r.json")]
    code, err, outlived = _stop_when_started(cmd, pid_file, signal.SIGTERM, tmp_path)
    assert code == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "validate.py: stopped by SIGTERM; every server it started is stopped"
    assert not outlived, "the served arm's server outlived validate.py bakeoff"
