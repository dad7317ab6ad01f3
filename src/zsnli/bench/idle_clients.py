"""A fresh client's ``GET /health`` beside N idle keep-alive clients (issue 48), against 127.0.0.1 only.

For each N of ``--idle``: N clients each send one ``GET /health``, read the answer and stay connected
and silent (a pooled keep-alive connection); then ``--probes`` fresh clients, one after another, each
open a new connection and send ``GET /health``. Reports per N: the probes' statuses, their time
(connect to whole answer: p50 and max, ms) and how many of the N idle connections the server closed
(it sheds the longest idle when over ``ZSNLI_MAX_CONNECTIONS``; before issue 48 the probes got 503
``overloaded`` until ``ZSNLI_KEEP_ALIVE_S`` expired).

    python -m zsnli.bench.idle_clients --model-dir ./model --idle 0,100,520 --max-connections 512
    python -m zsnli.bench.idle_clients --url http://127.0.0.1:8000 --idle 0,600

``--model-dir`` starts serve.sh on a free port (``ZSNLI_MAX_CONNECTIONS`` from ``--max-connections``) and
stops it after. Prints one line per N and, with ``--json PATH``, writes them; exit 0 when every probe got
200, else 1. A benchmark, not a test: its times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from ..harness.cli import UsageParser, output_file, positive_int, positive_seconds
from ..harness.server import ServerError, ServerProcess, stops_servers, wait_for_url
from ..harness.stats import percentile
from .bench_args import check_model_dir, command_description
from .reports import write_report

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
ROOT = Path(__file__).resolve().parents[3]
REQUEST = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"


async def get_health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Send ``GET /health`` on an open connection and read its whole answer; returns the status."""
    writer.write(REQUEST)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length"), 0)
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def one_size(host: str, port: int, n_idle: int, probes: int, timeout: float) -> dict:
    """N idle keep-alive clients, then ``probes`` fresh ones: their statuses and times, and the idle ones closed."""
    idle = []
    try:
        for _ in range(n_idle):
            reader, writer = await asyncio.open_connection(host, port)
            await asyncio.wait_for(get_health(reader, writer), timeout)
            idle.append((reader, writer))
        statuses: dict[str, int] = {}
        times = []
        for _ in range(probes):
            t0 = time.perf_counter()
            try:
                reader, writer = await asyncio.open_connection(host, port)
                status = str(await asyncio.wait_for(get_health(reader, writer), timeout))
                writer.close()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                status = type(exc).__name__
            times.append(time.perf_counter() - t0)
            statuses[status] = statuses.get(status, 0) + 1
        await asyncio.sleep(0.2)
        shed = sum(1 for reader, _ in idle if reader.at_eof() or reader.exception() is not None)
    finally:
        for _, writer in idle:
            writer.close()
    return {"idle": n_idle, "probes": probes, "statuses": statuses, "idle_closed_by_server": shed,
            "p50_ms": round(percentile(times, 50) * 1000, 2), "max_ms": round(max(times) * 1000, 2)}


async def run(args: argparse.Namespace) -> list[dict]:
    """Every size of ``--idle`` in turn, against ``--url`` or a spawned server."""
    server = None
    try:
        if args.model_dir:
            server = ServerProcess(cmd=["bash", str(ROOT / "serve.sh")], cwd=ROOT, model_dir=args.model_dir,
                                   grace_s=30.0, env={"ZSNLI_MAX_CONNECTIONS": str(args.max_connections),
                                                      "ZSNLI_LOG_LEVEL": "warning"})
            server.start()
            await asyncio.to_thread(server.wait_healthy, 300)
            url = server.url
        else:
            url = args.url
            await asyncio.to_thread(wait_for_url, url, 60)
        where = urlparse(url)
        rows = []
        for n in args.idle:
            rows.append(await one_size(where.hostname, where.port or 80, n, args.probes, args.timeout))
            row = rows[-1]
            print(f"idle={row['idle']:5d}  probes={row['probes']}  statuses={row['statuses']}  "
                  f"p50={row['p50_ms']:.1f} ms  max={row['max_ms']:.1f} ms  idle closed={row['idle_closed_by_server']}",
                  flush=True)
        return rows
    finally:
        if server is not None:
            server.stop()


def _sizes(text: str) -> list[int]:
    """The argparse type of ``--idle``: comma-separated counts >= 0, at least one; ``argparse.ArgumentTypeError``
    otherwise."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of counts, got {text!r}") from None
    if not sizes or min(sizes) < 0:
        raise argparse.ArgumentTypeError(f"counts >= 0, got {text!r}")
    return sizes


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option; `parse_args` checks the rest."""
    ap = UsageParser(prog="python -m zsnli.bench.idle_clients", description=command_description(__doc__))
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server on this machine")
    where.add_argument("--model-dir", help="start serve.sh on this model dir (free port) and stop it after")
    ap.add_argument("--idle", type=_sizes, default="0,100,520",
                    help="idle client counts, comma-separated (default: %(default)s)")
    ap.add_argument("--probes", type=positive_int, default=20, help="fresh clients per count (default: %(default)s)")
    ap.add_argument("--max-connections", type=positive_int, default=512,
                    help="ZSNLI_MAX_CONNECTIONS of the spawned server (default: %(default)s)")
    ap.add_argument("--timeout", type=positive_seconds, default=30.0,
                    help="seconds per request (default: %(default)s)")
    ap.add_argument("--json", type=output_file, help="write the rows here")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (module docstring); refuses a non-loopback ``--url`` and a ``--model-dir`` that is no model
    directory (`zsnli.bench.bench_args.check_model_dir`)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.model_dir is not None:
        check_model_dir(ap, args.model_dir)
    if args.url and (urlparse(args.url).hostname or "") not in LOOPBACK:
        ap.error(f"--url must be on this machine (127.0.0.1/localhost), got {args.url}")
    return args


@stops_servers("python -m zsnli.bench.idle_clients")
def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every probe got 200, 1 otherwise, 2 (one line) when no server answers."""
    args = parse_args(argv)
    try:
        rows = asyncio.run(run(args))
    except (ServerError, OSError) as exc:
        print(f"idle_clients: error: {exc}", file=sys.stderr)
        return 2
    write_report(args.json, {"rows": rows, "max_connections": args.max_connections if args.model_dir else None})
    return 0 if all(set(r["statuses"]) <= {"200"} for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
