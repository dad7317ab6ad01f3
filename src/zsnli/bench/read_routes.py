"""Read-route latency while bake-offs run (issue 22, item 10): reads must never wait behind bake-off work.

Starts one server (`zsnli.serve.main` through ``python server.py``, this interpreter, a
`zsnli.harness.server.ServerProcess` on 127.0.0.1), stores one small bake-off so that every read route
has something to show, then measures the read routes in two phases:

1. idle: ``--seconds`` seconds of reads and nothing else;
2. busy: ``--bakeoffs`` bake-offs (default 2, ``ZSNLI_BAKEOFF_MAX_CONCURRENT``) of one dataset of
   ``dev/zeroshot_dev.jsonl`` (``--dataset``; the label descriptions as ``labels``; ``--arms``) POSTed at
   once, reads running until every one of them has answered.

Reads: ``GET /bakeoffs`` (the latest list page), ``/v1/bakeoffs``, ``/v1/bakeoffs/{id}``,
``/bakeoffs/{id}`` (result page), ``/bakeoffs/{id}/badge.svg``, ``/v1/receipts/public-key``,
``/health`` and ``/metrics``, in turn, by ``--readers`` closed-loop readers. Prints p50 / p95 / max per
route and over all reads in both phases, the bake-offs' wall time, and a last line
``read routes p95 while N bake-offs run: X ms (target < 100 ms): PASS/FAIL``; exit 0 on PASS, 1 on
FAIL or a server failure, 2 on a usage mistake.

    python -m zsnli.bench.read_routes --model-dir ./model --json reports/read_routes.json

Imports httpx, `zsnli.harness` (examples, server, stats, cli) and `zsnli.bench.bench_args` (the model directory
check); the server only over HTTP.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ..harness.cli import UsageParser, output_file, positive_float, positive_int, positive_seconds
from ..harness.examples import DEV_EXAMPLES, ExamplesError, load_examples
from ..harness.server import ServerError, ServerProcess, stops_servers
from ..harness.stats import percentile
from .bench_args import check_model_dir, command_description
from .reports import write_report

ROOT = Path(__file__).resolve().parents[3]
TARGET_P95_MS = 100.0
ALL_ARMS = ("served", "served_about", "embedding_similarity", "embedding_logreg", "embedding_knn", "tfidf_logreg",
            "majority")


def read_paths(bakeoff_id: str) -> list[str]:
    """The read routes measured, for a stored bake-off ``bakeoff_id``."""
    return ["/bakeoffs", "/v1/bakeoffs", f"/v1/bakeoffs/{bakeoff_id}", f"/bakeoffs/{bakeoff_id}",
            f"/bakeoffs/{bakeoff_id}/badge.svg", "/v1/receipts/public-key", "/health", "/metrics"]


async def reader(client: httpx.AsyncClient, paths: list[str], stop: asyncio.Event, out: dict[str, list[float]],
                 offset: int) -> None:
    """One closed-loop reader: GET the paths in turn until ``stop``; appends each latency (ms) per path.
    A status other than 200 counts as a failure (recorded under ``"failed"``)."""
    i = offset
    while not stop.is_set():
        path = paths[i % len(paths)]
        i += 1
        t0 = time.perf_counter()
        try:
            r = await client.get(path)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        ms = (time.perf_counter() - t0) * 1000
        out.setdefault(path if ok else "failed", []).append(ms)


def summarise(lat: dict[str, list[float]], bakeoff_id: str) -> dict:
    """Per-route and overall ``{"n", "p50_ms", "p95_ms", "max_ms"}`` (the id in paths shown as ``{id}``)."""
    def one(xs: list[float]) -> dict:
        return {"n": len(xs), "p50_ms": round(percentile(xs, 50), 1), "p95_ms": round(percentile(xs, 95), 1),
                "max_ms": round(max(xs), 1) if xs else None}

    out = {path.replace(bakeoff_id, "{id}"): one(xs) for path, xs in lat.items() if path != "failed"}
    out["all reads"] = one([x for path, xs in lat.items() if path != "failed" for x in xs])
    out["failed"] = len(lat.get("failed", []))
    return out


async def phase(base: str, paths: list[str], readers: int, seconds: float, bakeoffs: list[dict],
                max_seconds: float) -> tuple[dict[str, list[float]], dict]:
    """Reads for ``seconds`` s (no bake-offs) or until every bake-off in ``bakeoffs`` answered."""
    lat: dict[str, list[float]] = {}
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=readers + len(bakeoffs) + 2)
    async with httpx.AsyncClient(base_url=base, timeout=max_seconds, limits=limits) as client:
        loops = [asyncio.create_task(reader(client, paths, stop, lat, k)) for k in range(readers)]
        t0 = time.perf_counter()
        info: dict = {}
        if bakeoffs:
            answers = await asyncio.gather(*(client.post("/v1/bakeoff", json=b) for b in bakeoffs),
                                           return_exceptions=True)
            info["bakeoffs"] = [a.status_code if isinstance(a, httpx.Response) else type(a).__name__ for a in answers]
        else:
            await asyncio.sleep(seconds)
        info["wall_s"] = round(time.perf_counter() - t0, 1)
        stop.set()
        await asyncio.gather(*loops)
    return lat, info


def bakeoff_body(dataset: str, arms: list[str]) -> dict:
    """The POST /v1/bakeoff body for one dataset of the dev examples (label descriptions as ``labels``)."""
    rows = [d for d in load_examples(ROOT / DEV_EXAMPLES).examples if d.dataset == dataset]
    if not rows:
        raise ExamplesError(f"--dataset {dataset!r}: no such dataset in {DEV_EXAMPLES}")
    names = [f"label{j}" for j in range(len(rows[0].labels))]
    return {"task_description": f"dev set {dataset}", "labels": dict(zip(names, rows[0].labels)),
            "examples": [{"input": d.text, "expected": names[d.label]} for d in rows], "candidates": arms}


def _parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    p = UsageParser(prog="python -m zsnli.bench.read_routes", description=command_description(__doc__))
    p.add_argument("--model-dir", default="./model",
                   help="the model the server serves (ZSNLI_MODEL_DIR; default: %(default)s)")
    p.add_argument("--dataset", default="news_topic",
                   help=f"dataset of {DEV_EXAMPLES} for the bake-offs (default: %(default)s)")
    p.add_argument("--arms", nargs="+", default=list(ALL_ARMS), choices=ALL_ARMS,
                   help="arms of the bake-offs (default: all seven, %(default)s)")
    p.add_argument("--bakeoffs", type=positive_int, default=2,
                   help="bake-offs running at once (default: %(default)s)")
    p.add_argument("--readers", type=positive_int, default=2, help="closed-loop readers (default: %(default)s)")
    p.add_argument("--seconds", type=positive_seconds, default=10.0,
                   help="length of the idle phase (default: %(default)s)")
    p.add_argument("--time-budget", type=positive_float, default=120.0,
                   help="ZSNLI_BAKEOFF_TIME_BUDGET_S of the server (default: %(default)s)")
    p.add_argument("--json", type=output_file, default=None,
                   help="also write the report (per-route latencies of both phases) here as JSON")
    return p


@stops_servers("python -m zsnli.bench.read_routes")
def main(argv: list[str] | None = None) -> int:
    """Run both phases (module docstring); 0 PASS, 1 FAIL or server failure, 2 usage."""
    ap = _parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    try:
        body = bakeoff_body(args.dataset, args.arms)
    except ExamplesError as exc:
        print(f"read_routes: {exc}", file=sys.stderr)
        return 2
    seed = {"task_description": "seed", "candidates": ["majority"],
            "examples": [{"input": "Cannot sign in", "expected": "access"},
                         {"input": "Refund my invoice", "expected": "billing"}]}
    report: dict = {"dataset": args.dataset, "examples": len(body["examples"]), "labels": len(body["labels"]),
                    "arms": args.arms, "bakeoffs": args.bakeoffs, "readers": args.readers}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"ZSNLI_BAKEOFF_DB": str(Path(tmp) / "b.sqlite3"), "ZSNLI_RECEIPT_KEY": str(Path(tmp) / "key.pem"),
               "ZSNLI_LOG_LEVEL": "warning", "ZSNLI_BAKEOFF_MAX_CONCURRENT": str(args.bakeoffs),
               "ZSNLI_BAKEOFF_TIME_BUDGET_S": f"{args.time_budget:g}"}
        server = ServerProcess(["{python}", "server.py"], cwd=ROOT, env=env, model_dir=args.model_dir, grace_s=60.0)
        try:
            with server:
                server.wait_healthy(300)
                r = httpx.post(server.url + "/v1/bakeoff", json=seed, timeout=300)
                r.raise_for_status()
                paths = read_paths(r.json()["id"])
                for path in paths:  # warm every route once (first page load imports the bake-off's pages)
                    httpx.get(server.url + path, timeout=60)
                idle, _ = asyncio.run(phase(server.url, paths, args.readers, args.seconds, [], 60))
                busy, info = asyncio.run(phase(server.url, paths, args.readers, 0, [body] * args.bakeoffs,
                                               args.time_budget + 120))
        except (ServerError, httpx.HTTPError) as exc:
            print(f"read_routes: {exc}", file=sys.stderr)
            return 1
    report["idle"], report["busy"] = summarise(idle, r.json()["id"]), summarise(busy, r.json()["id"])
    report["busy"].update(info)
    for name in ("idle", "busy"):
        print(f"{name}:", flush=True)
        for route, s in report[name].items():
            if isinstance(s, dict):
                print(f"  {route:28s} n={s['n']:5d}  p50 {s['p50_ms']:8.1f} ms  p95 {s['p95_ms']:8.1f} ms  "
                      f"max {s['max_ms']} ms")
        print(f"  failed reads: {report[name]['failed']}")
    p95 = report["busy"]["all reads"]["p95_ms"]
    ok = p95 < TARGET_P95_MS and report["busy"]["failed"] == 0
    print(f"bake-offs: {info['bakeoffs']} in {info['wall_s']} s")
    print(f"read routes p95 while {args.bakeoffs} bake-offs run: {p95} ms (target < {TARGET_P95_MS:g} ms): "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    write_report(args.json, report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
