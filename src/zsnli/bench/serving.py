"""Start a zsnli server in a child process and drive it over HTTP (httpx, closed loop).

``ServerProcess`` launches ``serve.sh`` (what ships) or, where there is no
``serve.sh``, ``uvicorn zsnli.app:create_app --factory``, on 127.0.0.1 and a
free port, with ``ZSNLI_*`` settings in its environment, and waits for
``GET /health`` to answer 200. ``run_load`` posts documents to
``/classify`` from ``concurrency`` workers, each sending its next document
as soon as its previous answer arrived (closed loop), so HTTP, JSON and the
event loop are all inside the measured time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .common import child_env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host`` (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerError(RuntimeError):
    """The server did not become healthy (exited, or timed out); the message holds its log tail."""


class ServerProcess:
    """A zsnli server child process; use as a context manager (stops it on exit).

    model_dir: served model (absolute path passed as ZSNLI_MODEL_DIR).
    settings: extra ``ZSNLI_*`` variables (e.g. ``{"ZSNLI_CALIBRATION_PATH": ...}``).
    launcher: ``"serve.sh"``, ``"uvicorn"`` or ``"auto"`` (serve.sh when
        ``repo_root/serve.sh`` exists).
    threads: pins OMP/MKL threads and ZSNLI_TORCH_THREADS (None: defaults).
    health_timeout_s: how long to wait for /health 200.
    Attributes after start: ``url``, ``pid``, ``launcher``, ``log_path``
    (the server's output; removed when the ``with`` block ends without an
    error), ``startup_s``, ``health`` (the /health body).
    """

    def __init__(self, model_dir: str | Path, settings: dict[str, str] | None = None, launcher: str = "auto",
                 repo_root: str | Path = ".", threads: int | None = None, health_timeout_s: float = 900.0,
                 port: int | None = None) -> None:
        self.model_dir = Path(model_dir).resolve()
        self.settings = dict(settings or {})
        self.repo_root = Path(repo_root).resolve()
        if launcher == "auto":
            launcher = "serve.sh" if (self.repo_root / "serve.sh").is_file() else "uvicorn"
        if launcher not in ("serve.sh", "uvicorn"):
            raise ValueError(f"launcher must be serve.sh, uvicorn or auto, got {launcher!r}")
        self.launcher = launcher
        self.threads = threads
        self.health_timeout_s = health_timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="zsnli-bench-server-", suffix=".log", delete=False)
        self.log_path = Path(self._log.name)
        self.startup_s: float | None = None
        self.health: dict[str, Any] | None = None

    @property
    def pid(self) -> int:
        """The server process id (the Python process: serve.sh ``exec``s it)."""
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        """The argv that starts the server."""
        if self.launcher == "serve.sh":
            return ["bash", str(self.repo_root / "serve.sh")]
        return [sys.executable, "-m", "uvicorn", "zsnli.app:create_app", "--factory", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning", "--no-access-log"]

    def env(self) -> dict[str, str]:
        """The child's environment."""
        extra = {"ZSNLI_MODEL_DIR": str(self.model_dir), "HOST": "127.0.0.1", "PORT": str(self.port),
                 "PYTHON": sys.executable, "ZSNLI_LOG_LEVEL": "warning"}
        if self.threads:
            extra["ZSNLI_TORCH_THREADS"] = str(self.threads)
        extra.update(self.settings)
        return child_env(extra, self.threads)

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the server's combined stdout/stderr."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def start(self) -> "ServerProcess":
        """Launch and block until ``/health`` answers 200. Raises ``ServerError`` (with log tail)."""
        import httpx

        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), env=self.env(), cwd=str(self.repo_root), stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.health_timeout_s
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise ServerError(f"server exited with code {code} before becoming healthy "
                                      f"(log {self.log_path}):\n{self.log_tail()}")
                try:
                    r = client.get(self.url + "/health")
                    if r.status_code == 200:
                        self.health = r.json()
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerError(f"server not healthy after {self.health_timeout_s:.0f} s "
                                      f"(log {self.log_path}):\n{self.log_tail()}")
                time.sleep(0.25)
        self.startup_s = time.perf_counter() - t0
        return self

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the server's process group (it drains), SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        self._log.close()
        if exc_type is None:  # kept (path in the error) only when something went wrong
            self.log_path.unlink(missing_ok=True)


@dataclass
class LoadResult:
    """What one load run measured.

    wall_s: from the first timed request sent to the last answer received.
    latencies_s: per timed document, request seconds (retries included), input order.
    probabilities: per timed document, the answer's probabilities (None on failure).
    errors: ``{"status or exception": count}`` of failed documents; retries_503: 503 answers retried.
    """

    docs: int
    pairs: int
    wall_s: float
    latencies_s: list[float]
    probabilities: list[list[float] | None]
    errors: dict[str, int] = field(default_factory=dict)
    retries_503: int = 0

    @property
    def docs_per_s(self) -> float:
        return self.docs / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def pairs_per_s(self) -> float:
        return self.pairs / self.wall_s if self.wall_s > 0 else float("nan")


async def _load(url: str, docs: Sequence[dict[str, Any]], concurrency: int, warmup: int, timeout_s: float,
                progress: bool, desc: str, max_retries: int) -> LoadResult:
    import httpx
    from tqdm import tqdm

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    latencies: list[float] = [float("nan")] * len(docs)
    probs: list[list[float] | None] = [None] * len(docs)
    errors: dict[str, int] = {}
    retries = 0

    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:

        async def post(i: int, d: dict[str, Any]) -> tuple[float, list[float] | None, str | None]:
            nonlocal retries
            body = {"id": d.get("id", i), "text": d["text"], "labels": list(d["labels"])}
            t0 = time.perf_counter()
            for attempt in range(max_retries + 1):
                try:
                    r = await client.post("/classify", json=body)
                except httpx.HTTPError as exc:
                    return time.perf_counter() - t0, None, type(exc).__name__
                if r.status_code == 503 and attempt < max_retries:
                    retries += 1
                    await asyncio.sleep(min(float(r.headers.get("retry-after", "1") or 1), 5.0) / 10)
                    continue
                if r.status_code != 200:
                    return time.perf_counter() - t0, None, f"HTTP {r.status_code}"
                return time.perf_counter() - t0, r.json()["probabilities"], None
            return time.perf_counter() - t0, None, "HTTP 503"

        async def drive(items: Sequence[tuple[int, dict[str, Any]]], record: bool, bar) -> None:
            queue: asyncio.Queue = asyncio.Queue()
            for item in items:
                queue.put_nowait(item)

            async def worker() -> None:
                while True:
                    try:
                        i, d = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    dt, p, err = await post(i, d)
                    if record:
                        latencies[i], probs[i] = dt, p
                        if err:
                            errors[err] = errors.get(err, 0) + 1
                    if bar is not None:
                        bar.update(1)

            await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))

        if warmup:
            warm = [(i, docs[i % len(docs)]) for i in range(warmup)]
            await drive(warm, False, None)
        bar = tqdm(total=len(docs), desc=desc, unit="doc", disable=not progress, file=sys.stderr)
        t_start = time.perf_counter()
        await drive(list(enumerate(docs)), True, bar)
        wall = time.perf_counter() - t_start
        bar.close()
    return LoadResult(docs=len(docs), pairs=sum(len(d["labels"]) for d in docs), wall_s=wall,
                      latencies_s=latencies, probabilities=probs, errors=errors, retries_503=retries)


def run_load(url: str, docs: Sequence[dict[str, Any]], concurrency: int, warmup: int = 0,
             timeout_s: float = 600.0, progress: bool = True, desc: str | None = None,
             max_retries: int = 20) -> LoadResult:
    """POST every document to ``url/classify`` from ``concurrency`` closed-loop workers.

    warmup: that many requests (documents cycled from the start) are sent
    first, at the same concurrency, and not measured.
    A 503 (overload) is retried after a tenth of its ``Retry-After`` (at most
    ``max_retries`` times; counted in ``retries_503``); any other non-200
    answer is an error for that document. Returns a ``LoadResult``.
    """
    return asyncio.run(_load(url, docs, concurrency, warmup, timeout_s, progress,
                             desc or f"zsnli c={concurrency}", max_retries))
