"""Overload test for the zsnli server (issue 6): a burst far above capacity, against 127.0.0.1 only.

Sends ``--requests`` POST /classify requests (``--labels`` labels each) at
``--concurrency``, while polling /health and sampling the server's RSS; then
sends a few requests one at a time to show latency is back to normal. Every
request must end 200 or 503 (+ Retry-After). Bounded in count and time
(``--max-seconds``); stops by itself.

    # against a running server (give its pid for RSS):
    python bench/load.py --url http://127.0.0.1:8000 --pid 12345
    # or start one (server.py, this interpreter) on a free port, and stop it (SIGTERM) at the end:
    python bench/load.py --spawn-model-dir ./model
    # memory bound (issue 5): 32 concurrent 256-label requests of 2,000-character texts, all admitted:
    ZSNLI_QUEUE_CAPACITY_PAIRS=16384 python bench/load.py --spawn-model-dir ./model \
        --requests 32 --concurrency 32 --labels 256 --text-chars 2000 --after 1
    # small smoke run:
    python bench/load.py --spawn-model-dir ./model --requests 50 --concurrency 16 --labels 5

Prints (and with ``--json PATH`` writes) requests, 200s, 503s, other
statuses, transport errors, max/p50/p99 latency, /health availability during
the burst, post-burst latency, peak server RSS, and the server's exit code
after SIGTERM when spawned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
ROOT = Path(__file__).resolve().parents[1]

WORDS = ("the team won the match after a late goal while markets fell and the bank cut its forecast "
         "scientists found new data on the chip as the election campaign reached the city").split()


def make_request(i: int, n_labels: int, rng: random.Random, text_chars: int | None = None) -> dict:
    """One request: a random-word text (``text_chars`` characters exactly, else 5-400 words), n_labels labels."""
    n_words = rng.choice([5, 20, 60, 150, 400]) if text_chars is None else text_chars // 2 + 1
    text = " ".join(rng.choice(WORDS) for _ in range(n_words))
    if text_chars is not None:
        text = text[:text_chars]
    labels = [f"This text is about topic number {j} and {rng.choice(WORDS)}." for j in range(n_labels)]
    return {"id": i, "text": text, "labels": labels}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class RssSampler:
    """Samples the RSS of a pid (and its children) every ``interval`` seconds; keeps the peak."""

    def __init__(self, pid: int | None, interval: float = 0.2):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._task: asyncio.Task | None = None

    def _rss(self) -> int:
        try:
            import psutil

            p = psutil.Process(self.pid)
            return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
        except Exception:  # noqa: BLE001 - process gone or psutil missing
            try:
                with open(f"/proc/{self.pid}/status") as handle:
                    for line in handle:
                        if line.startswith("VmRSS:"):
                            return int(line.split()[1]) * 1024
            except OSError:
                pass
            return 0

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self._rss())
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.pid:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self.peak = max(self.peak, self._rss())


async def health_poller(client: httpx.AsyncClient, stop: asyncio.Event, out: dict) -> None:
    while not stop.is_set():
        t = time.monotonic()
        try:
            r = await client.get("/health", timeout=5)
            out["ok" if r.status_code == 200 else "not_ok"] += 1
        except httpx.HTTPError:
            out["errors"] += 1
        out["max_latency_s"] = max(out["max_latency_s"], time.monotonic() - t)
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass


async def burst(args, client: httpx.AsyncClient) -> dict:
    rng = random.Random(args.seed)
    bodies = [make_request(i, args.labels, rng, args.text_chars) for i in range(args.requests)]
    sem = asyncio.Semaphore(args.concurrency)
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    missing_retry_after = 0
    transport_errors: dict[str, int] = {}

    async def one(body: dict) -> None:
        nonlocal missing_retry_after
        async with sem:
            t = time.monotonic()
            try:
                r = await client.post("/classify", json=body, timeout=args.timeout)
                key = str(r.status_code)
                if r.status_code == 503 and "retry-after" not in r.headers:
                    missing_retry_after += 1
                if r.status_code == 200:
                    p = r.json()["probabilities"]
                    if len(p) != len(body["labels"]) or abs(sum(p) - 1) > 1e-6:
                        key = "200-bad-body"
            except httpx.HTTPError as exc:
                key = "transport_error"
                transport_errors[type(exc).__name__] = transport_errors.get(type(exc).__name__, 0) + 1
            latencies.append(time.monotonic() - t)
            statuses[key] = statuses.get(key, 0) + 1

    t0 = time.monotonic()
    tasks = [asyncio.create_task(one(b)) for b in bodies]
    done, pending = await asyncio.wait(tasks, timeout=args.max_seconds)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    wall = time.monotonic() - t0
    return {
        "requests": args.requests,
        "labels_per_request": args.labels,
        "concurrency": args.concurrency,
        "wall_s": round(wall, 2),
        "status_200": statuses.get("200", 0),
        "status_503": statuses.get("503", 0),
        "statuses": dict(sorted(statuses.items())),
        "unfinished": len(pending),
        "transport_errors": transport_errors,
        "503_without_retry_after": missing_retry_after,
        "max_latency_s": round(max(latencies), 3) if latencies else None,
        "p50_latency_s": round(percentile(latencies, 0.5), 3) if latencies else None,
        "p99_latency_s": round(percentile(latencies, 0.99), 3) if latencies else None,
        "throughput_rps": round(statuses.get("200", 0) / wall, 2) if wall > 0 else None,
    }


async def after_burst(args, client: httpx.AsyncClient) -> dict:
    rng = random.Random(args.seed + 1)
    lat = []
    codes = []
    for i in range(args.after):
        t = time.monotonic()
        r = await client.post("/classify", json=make_request(10**6 + i, args.labels, rng, args.text_chars), timeout=args.timeout)
        lat.append(time.monotonic() - t)
        codes.append(r.status_code)
    return {"after_requests": args.after, "after_statuses": sorted(set(codes)),
            "after_median_latency_s": round(statistics.median(lat), 3) if lat else None,
            "after_max_latency_s": round(max(lat), 3) if lat else None}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(model_dir: str, port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "ZSNLI_MODEL_DIR": model_dir, "HOST": "127.0.0.1", "PORT": str(port),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


async def wait_ready(client: httpx.AsyncClient, proc: subprocess.Popen | None, limit: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before becoming ready")
        try:
            if (await client.get("/health", timeout=2)).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.25)
    raise SystemExit(f"server not ready after {limit:.0f} s")


async def main_async(args) -> dict:
    proc = None
    url = args.url
    if args.spawn_model_dir:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = spawn(args.spawn_model_dir, port, Path(args.server_log))
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK:
        raise SystemExit(f"refusing to load-test {host!r}: 127.0.0.1 only")
    limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
    report: dict = {"url": url}
    try:
        async with httpx.AsyncClient(base_url=url, limits=limits) as client:
            report["ready_after_s"] = round(await wait_ready(client, proc, args.ready_timeout), 2)
            sampler = RssSampler(proc.pid if proc else args.pid)
            sampler.start()
            health = {"ok": 0, "not_ok": 0, "errors": 0, "max_latency_s": 0.0}
            stop = asyncio.Event()
            async with httpx.AsyncClient(base_url=url) as health_client:
                poller = asyncio.create_task(health_poller(health_client, stop, health))
                report.update(await burst(args, client))
                stop.set()
                await poller
            health["max_latency_s"] = round(health["max_latency_s"], 3)
            report["health_during_burst"] = health
            report.update(await after_burst(args, client))
            await sampler.stop()
            report["peak_rss_mib"] = round(sampler.peak / 2**20, 1) if sampler.peak else None
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                report["server_exit_code"] = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                report["server_exit_code"] = "killed after 60 s"
    return report


def at_least_one(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """CLI arguments; ``--requests`` (at most 100,000), ``--concurrency``, ``--labels`` and
    ``--text-chars`` must be >= 1 (argparse error, exit 2, otherwise)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (loopback only)")
    ap.add_argument("--spawn-model-dir", help="start server.py on this model dir (free port) and stop it after")
    ap.add_argument("--server-log", default="runs/load_server.log", help="where a spawned server logs")
    ap.add_argument("--pid", type=int, help="server pid, for peak RSS (when not spawned)")
    ap.add_argument("--requests", type=at_least_one, default=2000, help="1..100000 (default: %(default)s)")
    ap.add_argument("--concurrency", type=at_least_one, default=256)
    ap.add_argument("--labels", type=at_least_one, default=50, help="labels per request")
    ap.add_argument("--text-chars", type=at_least_one, default=None,
                    help="every text exactly this many characters, >= 1 (default: 5-400 random words)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-request client timeout, s")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="bound on the whole burst, s")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--after", type=int, default=5, help="sequential requests after the burst")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    if args.requests > 100_000:
        ap.error(f"argument --requests: must be at most 100000, got {args.requests}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(main_async(args))
    for key, value in report.items():
        print(f"{key:>26}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    answered = report.get("status_200", 0) + report.get("status_503", 0)
    ok = answered == report.get("requests") and not report.get("503_without_retry_after") and not report.get("unfinished")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
