"""Start, watch and stop a zsnli server process for the harness.

The harness starts ``serve.sh`` (or any command given with ``--serve-cmd``)
in its own process group with ``ZSNLI_HOST``/``ZSNLI_PORT`` (and
``ZSNLI_MODEL_DIR`` for a model-directory arm) in the environment, plus
``HOST``/``PORT`` (what serve.sh reads) and ``PYTHON`` (this interpreter,
unless already set), polls
``GET /health`` until it answers 200, and on exit terminates the whole
group (SIGTERM, then SIGKILL after a grace period) whatever happened.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

import httpx

DEFAULT_SERVE_CMD = "bash serve.sh"
HEALTH_POLL_S = 0.25


class ServerError(RuntimeError):
    """The server could not be started, died, or did not become healthy in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def get_health(url: str, timeout: float = 5.0) -> tuple[int | None, dict | None, str]:
    """``GET {url}/health``: (status code or None, JSON body or None, error text or '')."""
    try:
        resp = httpx.get(url.rstrip("/") + "/health", timeout=timeout)
    except httpx.HTTPError as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    try:
        body = resp.json()
    except ValueError:
        body = None
    return resp.status_code, body if isinstance(body, dict) else None, ""


class ServerProcess:
    """A server child process bound to 127.0.0.1 on a free port; a context manager.

    ``cmd`` is a shell-like string or an argv list, run in ``cwd``; ``{port}``
    and ``{host}`` in it are replaced. ``env`` is added to the inherited
    environment. The process's stdout/stderr go to a log file (``log_path``)
    whose tail is quoted in errors. ``stop()`` is idempotent.
    """

    def __init__(
        self,
        cmd: str | Sequence[str] = DEFAULT_SERVE_CMD,
        cwd: str | Path = ".",
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        grace_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        self.argv = [a.replace("{port}", str(self.port)).replace("{host}", host) for a in argv]
        self.cwd = Path(cwd)
        self.env = dict(os.environ)
        # serve.sh reads HOST/PORT and runs $PYTHON (default python3): point it at this interpreter
        self.env.update({"HOST": host, "PORT": str(self.port), "ZSNLI_HOST": host, "ZSNLI_PORT": str(self.port)})
        self.env.setdefault("PYTHON", sys.executable)
        self.env.update(env or {})
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        fd, name = tempfile.mkstemp(prefix="zsnli-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:8123``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ServerProcess":
        """Spawn the process in a new session (its own process group). Raises ``ServerError`` if it cannot run."""
        log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            raise ServerError(f"cannot start {' '.join(self.argv)}: {exc}") from exc
        finally:
            log.close()
        return self

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the server's output."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, timeout_s: float) -> float:
        """Poll /health until 200; return seconds since ``start()`` (or since this call if not started here).

        Raises ``ServerError`` if the process exits first or ``timeout_s``
        passes, quoting the tail of the server log.
        """
        t0 = self.started_at if self.started_at is not None else time.monotonic()
        last = ""
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerError(
                    f"server exited with code {self.proc.returncode} before /health answered 200\n"
                    f"{self.log_tail()}"
                )
            code, _, err = get_health(self.url, timeout=min(5.0, max(0.5, timeout_s)))
            if code == 200:
                return time.monotonic() - t0
            last = err or f"HTTP {code}"
            if time.monotonic() - t0 > timeout_s:
                raise ServerError(f"/health not 200 after {timeout_s:.0f} s (last: {last})\n{self.log_tail()}")
            time.sleep(HEALTH_POLL_S)

    def stop(self) -> int | None:
        """Terminate the process group: SIGTERM, wait ``grace_s``, then SIGKILL. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        else:
            # the leader is gone; make sure no child it left in the group lives on
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
