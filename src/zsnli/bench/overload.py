"""Overload test for the zsnli server (issue 6): a burst far above capacity, against 127.0.0.1 only.

Sends ``--requests`` POST /classify requests (``--labels`` labels each) at
``--concurrency``, while polling /health and sampling the server's RSS; then
sends a few requests one at a time to show latency is back to normal. Every
request must end 200 or 503 (+ Retry-After). Bounded in count and time
(``--max-seconds``); stops by itself.

    # against a running server (give its pid for RSS):
    python -m zsnli.bench.overload --url http://127.0.0.1:8000 --pid 12345
    # or start one (serve.sh, this interpreter) on a free port, and stop it (SIGTERM) at the end:
    python -m zsnli.bench.overload --spawn-model-dir ./model
    # memory bound (issue 5): 32 concurrent 256-label requests of 2,000-character texts, all admitted:
    ZSNLI_QUEUE_CAPACITY_PAIRS=16384 python -m zsnli.bench.overload --spawn-model-dir ./model \
        --requests 32 --concurrency 32 --labels 256 --text-chars 2000 --after 1
    # small smoke run:
    python -m zsnli.bench.overload --spawn-model-dir ./model --requests 50 --concurrency 16 --labels 5

Prints (and with ``--json PATH`` writes) requests, 200s, 503s, other
statuses, transport errors, max/p50/p99 latency, /health availability during
the burst, post-burst latency, peak server RSS, and the server's exit code
after SIGTERM when spawned, then one verdict line: PASS (exit 0) or FAIL and why
(exit 1). Requests go through the harness's load driver (no 503 retries);
the server through its `ServerProcess`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

from ..harness.cli import UsageParser, non_negative_int, output_file, positive_int, positive_seconds
from ..runtime.progress import waiting
from ..harness.load import NOT_ANSWERED, run_requests_async
from ..harness.server import ServerError, ServerProcess, stops_servers, wait_for_url
from ..harness.stats import per_second, percentile
from .bench_args import check_model_dir, command_description
from .resources import RssSampler
from .reports import write_report

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
ROOT = Path(__file__).resolve().parents[3]

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


async def health_poller(client: httpx.AsyncClient, stop: asyncio.Event, out: dict) -> None:
    """GET /health, 0.5 s after each answer, until ``stop`` is set, counting into ``out`` the 200s (``ok``), other
    statuses (``not_ok``) and HTTP errors (``errors``), and keeping its ``max_latency_s``."""
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


async def burst(args) -> dict:
    """The burst: ``--requests`` requests at ``--concurrency`` through the harness's load driver."""
    rng = random.Random(args.seed)
    bodies = [make_request(i, args.labels, rng, args.text_chars) for i in range(args.requests)]
    result = await run_requests_async(args.url, bodies, args.concurrency, warmups=0, max_seconds=args.max_seconds,
                                      progress=False, request_timeout=args.timeout)
    statuses: dict[str, int] = {}
    transport_errors: dict[str, int] = {}
    unfinished = 0
    for a in result.answers:
        if a.status is None:
            if a.error == NOT_ANSWERED:
                unfinished += 1
                continue
            key = "transport_error"
            name = (a.error or "").split(":")[0]
            transport_errors[name] = transport_errors.get(name, 0) + 1
        elif a.status == 200 and not a.ok:
            key = "200-bad-body"
        else:
            key = str(a.status)
        statuses[key] = statuses.get(key, 0) + 1
    latencies = [a.seconds for a in result.answers if a.error != NOT_ANSWERED]
    wall = result.wall_s
    return {
        "requests": args.requests,
        "labels_per_request": args.labels,
        "concurrency": args.concurrency,
        "wall_s": round(wall, 2),
        "status_200": statuses.get("200", 0),
        "status_503": statuses.get("503", 0),
        "statuses": dict(sorted(statuses.items())),
        "unfinished": unfinished,
        "transport_errors": transport_errors,
        "503_without_retry_after": sum(1 for a in result.answers if a.status == 503 and a.retry_after is None),
        "max_latency_s": round(max(latencies), 3) if latencies else None,
        "p50_latency_s": round(percentile(latencies, 50), 3) if latencies else None,
        "p99_latency_s": round(percentile(latencies, 99), 3) if latencies else None,
        "throughput_rps": round(per_second(statuses.get("200", 0), wall), 2) if wall > 0 else None,
    }


async def after_burst(args, client: httpx.AsyncClient) -> dict:
    """``args.after`` /classify requests one at a time once the burst is over: their statuses and median and max
    latency (s)."""
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


async def main_async(args) -> dict:
    """Start the server (``--spawn-model-dir``) or use ``--url``; burst, /health during it, after; stop."""
    server = None
    report: dict = {}
    try:
        if args.spawn_model_dir:
            server = ServerProcess(cmd=["bash", str(ROOT / "serve.sh")], cwd=ROOT, model_dir=args.spawn_model_dir,
                                   grace_s=60.0)
            server.start()
            report["url"] = args.url = server.url
            with waiting(f"starting the server ({server.url})"):
                report["ready_after_s"] = round(await asyncio.to_thread(server.wait_healthy, args.ready_timeout), 2)
        else:
            report["url"] = args.url
            with waiting(f"waiting for {args.url}/health"):
                waited, _ = await asyncio.to_thread(wait_for_url, args.url, args.ready_timeout)
            report["ready_after_s"] = round(waited, 2)
        pid = server.pid if server is not None else args.pid
        with RssSampler(pid, interval_s=0.2) if pid else _NoSampler() as rss:
            health = {"ok": 0, "not_ok": 0, "errors": 0, "max_latency_s": 0.0}
            stop = asyncio.Event()
            async with httpx.AsyncClient(base_url=args.url) as health_client:
                poller = asyncio.create_task(health_poller(health_client, stop, health))
                with waiting(f"burst of {args.requests} requests at concurrency {args.concurrency}"):
                    report.update(await burst(args))
                stop.set()
                await poller
            health["max_latency_s"] = round(health["max_latency_s"], 3)
            report["health_during_burst"] = health
            async with httpx.AsyncClient(base_url=args.url) as client:
                with waiting(f"{args.after} requests after the burst"):
                    report.update(await after_burst(args, client))
        report["peak_rss_mib"] = round(rss.peak_bytes / 2**20, 1) if rss.peak_bytes else None
    finally:
        if server is not None:
            code = server.stop()
            report["server_exit_code"] = code
            if server.proc is not None and code is not None and code < 0:
                report["server_exit_code"] = f"{code} (killed after {server.grace_s:.0f} s)"
    return report


class _NoSampler:
    """Stands in for `RssSampler` when no server pid is known."""

    peak_bytes = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def verdict(report: dict) -> tuple[bool, str]:
    """(passed, one line): every request answered 200 or 503, every 503 with Retry-After, none unfinished."""
    reasons = []
    answered = report.get("status_200", 0) + report.get("status_503", 0)
    if answered != report.get("requests"):
        others = {k: v for k, v in (report.get("statuses") or {}).items() if k not in ("200", "503")}
        reasons.append(f"{report.get('requests', 0) - answered} of {report.get('requests')} requests not answered "
                       f"200/503 (other: {others or 'none'}, unfinished: {report.get('unfinished', 0)})")
    if report.get("503_without_retry_after"):
        reasons.append(f"{report['503_without_retry_after']} 503 answers without Retry-After")
    if report.get("unfinished") and not reasons:
        reasons.append(f"{report['unfinished']} requests unfinished within --max-seconds")
    if reasons:
        return False, "verdict: FAIL: " + "; ".join(reasons)
    return True, (f"verdict: PASS: all {report.get('requests')} requests answered 200 ({report.get('status_200')}) "
                  f"or 503 with Retry-After ({report.get('status_503')})")


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option; `parse_args` checks the rest."""
    ap = UsageParser(prog="python -m zsnli.bench.overload", description=command_description(__doc__))
    ap.add_argument("--url", default="http://127.0.0.1:8000",
                    help="server base URL, loopback only (default: %(default)s)")
    ap.add_argument("--spawn-model-dir", help="start serve.sh on this model dir (free port) and stop it after")
    ap.add_argument("--pid", type=positive_int, help="server pid, for peak RSS (when not spawned)")
    ap.add_argument("--requests", type=positive_int, default=2000, help="1..100000 (default: %(default)s)")
    ap.add_argument("--concurrency", type=positive_int, default=256,
                    help="requests in flight at once during the burst (default: %(default)s)")
    ap.add_argument("--labels", type=positive_int, default=50, help="labels per request (default: %(default)s)")
    ap.add_argument("--text-chars", type=positive_int, default=None,
                    help="every text exactly this many characters, >= 1 (default: 5-400 random words)")
    ap.add_argument("--timeout", type=positive_seconds, default=120.0,
                    help="per-request client timeout, s (default: %(default)s)")
    ap.add_argument("--max-seconds", type=positive_seconds, default=600.0,
                    help="bound on the whole burst, s (default: %(default)s)")
    ap.add_argument("--ready-timeout", type=positive_seconds, default=300.0,
                    help="seconds to wait for the server's /health to answer 200 before the burst (default: %(default)s)")
    ap.add_argument("--after", type=non_negative_int, default=5,
                    help="sequential requests after the burst (default: %(default)s)")
    ap.add_argument("--seed", type=non_negative_int, default=0,
                    help="seed of the random-word texts and labels (the requests after the burst use seed + 1; "
                         "default: %(default)s)")
    ap.add_argument("--json", type=output_file, help="also write the report here")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """CLI arguments; ``--requests`` (at most 100,000), ``--concurrency``, ``--labels`` and
    ``--text-chars`` must be >= 1, ``--spawn-model-dir`` a model directory (`zsnli.bench.bench_args.check_model_dir`)
    (argparse error, exit 2, otherwise)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.requests > 100_000:
        ap.error(f"argument --requests: must be at most 100000, got {args.requests}")
    if args.spawn_model_dir is not None:
        check_model_dir(ap, args.spawn_model_dir, "--spawn-model-dir")
    host = urlparse(args.url).hostname or ""
    if not args.spawn_model_dir and host not in LOOPBACK:
        ap.error(f"--url: refusing to load-test {host or args.url!r}: 127.0.0.1 only")
    return args


@stops_servers("python -m zsnli.bench.overload")
def main(argv: list[str] | None = None) -> int:
    """Run the overload test; print the figures and the verdict line; 0 on PASS, 1 on FAIL."""
    args = parse_args(argv)
    try:
        report = asyncio.run(main_async(args))
    except ServerError as exc:
        reason = str(exc).splitlines()[0].replace("let the harness start serve.sh (no --url)",
                                                  "pass --spawn-model-dir ./model to start one")
        print(f"verdict: FAIL: no server: {reason}", flush=True)
        return 1
    for key, value in report.items():
        print(f"{key:>26}: {value}")
    write_report(args.json, report)
    passed, line = verdict(report)
    print(line, flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
