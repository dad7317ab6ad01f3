"""The harness's one server launcher: start a zsnli server process, wait for ``/health``, stop it.

`ServerProcess` starts ``serve.sh`` (or any command: ``--serve-cmd``, the
uvicorn factory `UVICORN_CMD`) in its own process group on 127.0.0.1 and a
free port, with ``ZSNLI_HOST``/``ZSNLI_PORT`` and ``HOST``/``PORT`` (what
serve.sh reads), ``PYTHON`` (this interpreter, unless set), the offline hub
variables, the checkout's ``src/`` first on ``PYTHONPATH`` (when ``cwd`` is
a checkout) and any ``ZSNLI_*`` settings in its environment; it polls
``GET /health`` until 200 and, on exit, terminates the whole group (SIGTERM,
then SIGKILL after a grace period) whatever happened. `wait_for_url` does
the polling for a server someone else started and gives up at once when
nothing listens there. `serve_command` is ``--serve-cmd``'s argparse type (`command_problem`: an empty command or
one with an unbalanced quote is refused at parse time).

Every server this process started and has not stopped is in `live_servers`. `stops_servers` wraps the
``main`` of every command that starts servers (``python -m zsnli.bench`` and its siblings, ``validate.py``):
while it runs, SIGINT and SIGTERM raise `Interrupted` in the main thread (`raise_on_signals`), so each
``with``/``finally`` stops its server; then every server still live is stopped, one line says what stopped the
command, and it exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), no traceback. A second
signal while the servers stop kills them at once (SIGKILL). Without this a SIGTERM ended the command at once
and left its server running (its own session, re-parented to pid 1); Ctrl-C printed a traceback.

Used by validation and bench; imports nothing from zsnli (it talks HTTP).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import httpx

DEFAULT_SERVE_CMD = "bash serve.sh"
#: the app factory under uvicorn, for checkouts without serve.sh (``{host}``/``{port}`` substituted)
UVICORN_CMD = ("{python} -m uvicorn zsnli.serving.app:create_app --factory --host {host} --port {port} "
               "--log-level warning --no-access-log")
HEALTH_POLL_S = 0.25
#: the signals `raise_on_signals` turns into `Interrupted`: a terminal's Ctrl-C, and ``kill``/a supervisor's stop
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_LIVE: dict[int, "ServerProcess"] = {}  # id -> every server started here and not yet stopped


class ServerError(RuntimeError):
    """The server could not be started, died, did not become healthy in time, or nothing listens at a URL.

    The message's first line says what happened; further lines quote the server log's tail.
    """


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def offline_env(threads: int | None = None) -> dict[str, str]:
    """Environment for a child server: no hub access, unbuffered output, tokenizer thread pools off,
    and with ``threads`` the BLAS/OpenMP pools and ``ZSNLI_TORCH_THREADS`` pinned to that many."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    if threads:
        n = str(int(threads))
        env.update({"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "ZSNLI_TORCH_THREADS": n})
    return env


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


def wait_for_url(url: str, timeout_s: float) -> tuple[float, dict]:
    """Poll ``{url}/health`` until it answers 200; return (seconds waited, /health body).

    A server still loading (503, slow answers) is waited for up to
    ``timeout_s``; a refused connection (nothing listening) raises
    ``ServerError`` at once, as does the timeout.
    """
    t0 = time.monotonic()
    while True:
        try:
            resp = httpx.get(url.rstrip("/") + "/health", timeout=min(5.0, max(0.5, timeout_s)))
        except httpx.ConnectError as exc:
            raise ServerError(f"{url}: connection refused ({exc}); nothing is listening there: start the server "
                              "first, or let the harness start serve.sh (no --url)") from None
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code == 200:
                try:
                    body = resp.json()
                except ValueError:
                    body = None
                return time.monotonic() - t0, body if isinstance(body, dict) else {}
            last = f"HTTP {resp.status_code}"
        if time.monotonic() - t0 > timeout_s:
            raise ServerError(f"{url}: /health not 200 after {timeout_s:.0f} s (last: {last})")
        time.sleep(HEALTH_POLL_S)


def command_problem(cmd: str) -> str | None:
    """What is wrong with a server command line given as a string (``--serve-cmd``, a suite's ``serve_cmd``), in
    words, or None: empty or blank (nothing to run), or not splittable the shell's way (`shlex.split`: an
    unbalanced quote, a trailing backslash)."""
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        return f"{cmd!r} is not a command line ({exc}); quote it as a shell would"
    return None if argv else f"{cmd!r} is empty: give the command that starts a server, e.g. '{DEFAULT_SERVE_CMD}'"


def serve_command(text: str) -> str:
    """The argparse type of ``--serve-cmd``: ``text`` unchanged once `command_problem` finds nothing, else
    ``argparse.ArgumentTypeError`` with its words (one line at parse time, exit 2)."""
    import argparse

    problem = command_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


class ServerProcess:
    """A server child process bound to ``host`` on a free port; a context manager.

    cmd: a shell-like string or an argv list, run in ``cwd``; ``{port}``,
        ``{host}`` and ``{python}`` in it are replaced.
    env: added to the inherited environment after the defaults above (wins).
    model_dir: served as ``ZSNLI_MODEL_DIR`` (absolute) when given.
    threads: pins the child's thread pools (`offline_env`).
    grace_s: seconds between SIGTERM and SIGKILL in `stop`.
    The process's stdout/stderr go to a log file (``log_path``) whose tail is
    quoted in errors; leaving the ``with`` block without an error removes it.
    After `wait_healthy`: ``startup_s`` and ``health`` (the /health body).
    Raises `ServerError` (one line) for a command that is empty or not a command line (`command_problem`).
    """

    def __init__(self, cmd: str | Sequence[str] = DEFAULT_SERVE_CMD, cwd: str | Path = ".",
                 env: Mapping[str, str] | None = None, host: str = "127.0.0.1", port: int | None = None,
                 grace_s: float = 10.0, model_dir: str | Path | None = None, threads: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        problem = command_problem(cmd) if isinstance(cmd, str) else None if cmd else "the command is empty"
        if problem:
            raise ServerError(f"cannot start a server: {problem}")
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        subst = {"{port}": str(self.port), "{host}": host, "{python}": sys.executable}
        self.argv = [_substitute(a, subst) for a in argv]
        self.cwd = Path(cwd)
        self.env = dict(os.environ)
        self.env.update(offline_env(threads))
        # serve.sh reads HOST/PORT and runs $PYTHON (default python3): point it at this interpreter
        self.env.update({"HOST": host, "PORT": str(self.port), "ZSNLI_HOST": host, "ZSNLI_PORT": str(self.port)})
        self.env.setdefault("PYTHON", sys.executable)
        src = (self.cwd / "src").resolve()
        if (src / "zsnli").is_dir():  # a checkout: its server is the one under test, installed or not
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(src), os.environ.get("PYTHONPATH"))))
        if model_dir is not None:
            self.env["ZSNLI_MODEL_DIR"] = str(Path(model_dir).resolve())
        self.env.update(env or {})
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.startup_s: float | None = None
        self.health: dict[str, Any] | None = None
        self.launcher = "serve.sh" if "serve.sh" in " ".join(self.argv) else self.argv[0] if self.argv else ""
        fd, name = tempfile.mkstemp(prefix="zsnli-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:8123``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The child's process id (serve.sh ``exec``s Python, so it is the server's), None before `start`."""
        return None if self.proc is None else self.proc.pid

    def start(self) -> "ServerProcess":
        """Spawn the process in a new session (its own process group); returns at once.

        The log file is closed in this process whether or not the spawn worked.
        Raises ``ServerError`` when the command cannot be run.
        """
        self.started_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
            except OSError as exc:
                raise ServerError(f"cannot start {' '.join(self.argv)}: {exc}") from exc
        _LIVE[id(self)] = self
        return self

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the server's output."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, timeout_s: float) -> float:
        """Poll /health until 200; return seconds since `start` (or since this call if not started here).

        Sets ``startup_s`` and ``health``. Raises ``ServerError`` if the process
        exits first or ``timeout_s`` passes, quoting the tail of the server log.
        """
        t0 = self.started_at if self.started_at is not None else time.monotonic()
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerError(f"server exited with code {self.proc.returncode} before /health answered 200 "
                                  f"(log {self.log_path}):\n{self.log_tail()}")
            code, body, err = get_health(self.url, timeout=min(5.0, max(0.5, timeout_s)))
            if code == 200:
                self.startup_s, self.health = time.monotonic() - t0, body or {}
                return self.startup_s
            if time.monotonic() - t0 > timeout_s:
                raise ServerError(f"/health not 200 after {timeout_s:.0f} s (last: {err or f'HTTP {code}'}; "
                                  f"log {self.log_path}):\n{self.log_tail()}")
            time.sleep(HEALTH_POLL_S)

    def stop(self) -> int | None:
        """Terminate the process group: SIGTERM, wait ``grace_s``, then SIGKILL. Returns the exit code.

        Idempotent; None when never started.
        """
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(5)
        else:
            # the leader is gone; make sure no child it left in the group lives on
            _signal_group(proc.pid, signal.SIGKILL)
        _LIVE.pop(id(self), None)
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL the process group now (no grace); `stop` still reaps it. A no-op before `start`."""
        if self.proc is not None:
            _signal_group(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> "ServerProcess":
        """Start the process unless `start` already ran."""
        return self if self.proc is not None else self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        if exc_type is None:  # kept (its path is in the error) only when something went wrong
            self.log_path.unlink(missing_ok=True)


def start_server(model_dir: str | Path, settings: dict[str, str], launcher: str, repo_root: str | Path,
                 threads: int | None, health_timeout_s: float = 900.0) -> ServerProcess:
    """A started, healthy `ServerProcess` for a server arm: ``serve.sh`` (or the uvicorn factory when
    ``launcher`` is ``uvicorn``, or ``auto`` without serve.sh) with ``settings``. Raises ``ServerError``."""
    root = Path(repo_root).resolve()
    if launcher not in ("auto", "serve.sh", "uvicorn"):
        raise ValueError(f"launcher must be serve.sh, uvicorn or auto, got {launcher!r}")
    if launcher == "auto":
        launcher = "serve.sh" if (root / "serve.sh").is_file() else "uvicorn"
    cmd = ["bash", str(root / "serve.sh")] if launcher == "serve.sh" else UVICORN_CMD
    server = ServerProcess(cmd, cwd=root, model_dir=model_dir, threads=threads, env=settings, grace_s=30.0)
    server.launcher = launcher
    server.start()
    try:
        server.wait_healthy(health_timeout_s)
    except BaseException:  # unhealthy, or interrupted while waiting: never leave it running
        server.stop()
        raise
    return server


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM while `raise_on_signals` is in force.

    A ``KeyboardInterrupt``, so ``except Exception`` lets it through and every ``finally`` runs.
    ``signum``: the signal's number; ``str()``: its name (``SIGTERM``).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def live_servers() -> list[ServerProcess]:
    """The servers this process started (`ServerProcess.start`) and has not stopped yet, oldest first."""
    return list(_LIVE.values())


def _on_stop_signal(signum: int, frame: Any) -> None:
    if getattr(_on_stop_signal, "fired", False):  # a second signal while stopping: no more grace
        for server in live_servers():
            server.kill()
        return
    _on_stop_signal.fired = True  # type: ignore[attr-defined]
    raise Interrupted(signum)


@contextlib.contextmanager
def raise_on_signals() -> Iterator[None]:
    """While active, `STOP_SIGNALS` raise `Interrupted` in the main thread (the first one; a later one SIGKILLs
    every live server instead). The previous handlers are restored on exit. Elsewhere than in the main thread
    (where Python allows no handler) it does nothing."""
    try:
        previous = {sig: signal.signal(sig, _on_stop_signal) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread
        yield
        return
    _on_stop_signal.fired = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def stops_servers(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorator of a command's ``main(...) -> exit code`` that starts servers (see the module docstring).

    Under `raise_on_signals`; on ``KeyboardInterrupt`` (`Interrupted` or a plain Ctrl-C) every server still in
    `live_servers` is stopped (SIGTERM, then SIGKILL after its grace), ``PROG: stopped by SIGNAL; ...`` is
    printed on stderr (one line) and 128 + the signal's number is returned: 130 (SIGINT), 143 (SIGTERM).
    The wrapper carries ``stops_servers = True`` (tests/harness/test_harness_signals.py checks every command).
    """

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def guarded(*args: Any, **kwargs: Any) -> int:
            try:
                with raise_on_signals():
                    try:
                        return main(*args, **kwargs)
                    except KeyboardInterrupt as exc:
                        signum = getattr(exc, "signum", int(signal.SIGINT))
                        for server in live_servers():
                            server.stop()
            except KeyboardInterrupt as exc:  # a signal while the handlers were being restored
                signum = getattr(exc, "signum", int(signal.SIGINT))
                for server in live_servers():
                    server.stop()
            print(f"{prog}: stopped by {signal.Signals(signum).name}; every server it started is stopped",
                  file=sys.stderr, flush=True)
            return 128 + signum

        guarded.stops_servers = True  # type: ignore[attr-defined]
        return guarded

    return wrap


def _substitute(arg: str, subst: Mapping[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
