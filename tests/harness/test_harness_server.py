"""zsnli.harness.server: start, health, stop, logs, and a refused URL failing at once."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from zsnli.harness.server import ServerError, ServerProcess, free_port, wait_for_url

HEALTHY = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok", "port": sys.argv[1]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _open_fds_to(path: Path) -> list[str]:
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                fds.append(fd)
        except OSError:
            pass
    return fds


def test_wait_for_url_fails_at_once_when_nothing_listens():
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="connection refused") as info:
        wait_for_url(f"http://127.0.0.1:{free_port()}", timeout_s=120)
    assert time.monotonic() - t0 < 10
    assert "\n" not in str(info.value)


def test_a_checkout_puts_its_src_first_on_the_server_path(monkeypatch):
    """The server under test is the checkout's code even when another copy of zsnli is installed."""
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    server = ServerProcess(cwd=repo)
    assert server.env["PYTHONPATH"].split(os.pathsep) == [str(repo / "src"), "/elsewhere"]
    server.log_path.unlink()


def test_a_command_that_cannot_start_raises_and_leaves_no_open_log():
    server = ServerProcess(["/no/such/program-zsnli"])
    with pytest.raises(ServerError, match="cannot start"):
        server.start()
    assert _open_fds_to(server.log_path) == []
    assert server.stop() is None
    server.log_path.unlink(missing_ok=True)


def test_a_server_that_exits_is_reported_with_its_log():
    server = ServerProcess([sys.executable, "-c", "print('no model here', flush=True); raise SystemExit(3)"])
    with pytest.raises(ServerError) as info:
        with server:
            server.wait_healthy(60)
    message = str(info.value)
    assert message.startswith("server exited with code 3") and "no model here" in message
    assert server.log_path.is_file()  # kept: its path is in the error
    server.log_path.unlink()


def test_healthy_server_env_stop_and_log_removed(tmp_path):
    script = tmp_path / "healthy.py"
    script.write_text(HEALTHY, encoding="utf-8")
    with ServerProcess(f"{{python}} {script} {{port}}", cwd=tmp_path, model_dir=tmp_path, threads=2) as server:
        took = server.wait_healthy(60)
        assert took == server.startup_s and server.health == {"status": "ok", "port": str(server.port)}
        assert server.env["ZSNLI_MODEL_DIR"] == str(tmp_path.resolve()) and server.env["OMP_NUM_THREADS"] == "2"
        assert server.env["PORT"] == str(server.port) and server.env["HF_HUB_OFFLINE"] == "1"
        assert "PYTHONPATH" not in server.env or str(tmp_path) not in server.env["PYTHONPATH"]
        waited, body = wait_for_url(server.url, 10)
        assert body["status"] == "ok"
        log = server.log_path
    assert server.proc.returncode is not None
    assert not log.exists()
    with pytest.raises(ServerError, match="connection refused"):
        wait_for_url(server.url, 10)


def test_server_process_reports_a_refused_start(tmp_path):
    from conftest import build_bert_nli
    from zsnli.harness.server import ServerError, start_server

    bad = build_bert_nli(tmp_path / "generic", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ServerError, match="entailment") as info:
        start_server(bad, {}, "auto", Path(__file__).resolve().parents[2], threads=1, health_timeout_s=120)
    log = Path(info.value.args[0].split("(log ")[1].split(")")[0])
    assert log.is_file()
    log.unlink()


@pytest.mark.parametrize("cmd, needle", [("", "'' is empty"), ("  ", "'  ' is empty"), ([], "the command is empty"),
                                         ('bash "serve.sh', "is not a command line (No closing quotation)")])
def test_a_command_that_is_no_command_line_is_a_server_error_not_an_index_error(tmp_path, cmd, needle):
    """``--serve-cmd ''`` reached `ServerProcess` and failed with IndexError (a bake-off arm said "failed:
    IndexError"), an unbalanced quote with shlex's ValueError: both are one-line `ServerError`s, nothing started."""
    with pytest.raises(ServerError) as caught:
        ServerProcess(cmd, cwd=tmp_path)
    assert str(caught.value).startswith("cannot start a server: ") and needle in str(caught.value)
