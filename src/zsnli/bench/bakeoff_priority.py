"""/classify latency while a bake-off runs (issue 16): the bake-off's NLI pairs go through the same
batcher at a lower priority. Against 127.0.0.1 only; bounded; stops the servers it starts.

For each ``--priority`` value P (default ``1 0``: the shipped background priority, then equal priority
for comparison), a server (`zsnli.serve.main`, this interpreter, one `zsnli.harness.server.ServerProcess`)
is started with the bake-off arms' batcher priority (`zsnli.compare.service.arms_adapter.BACKGROUND_PRIORITY`)
set to P, then:

0. warm-up: the same ``/classify`` load for ``--warmup-s`` seconds, not measured: without it the "alone"
   phase, the first load a fresh server gets, was the slow one in all four runs of issue 31 (p50
   1.3-3.1 s against 0.24-0.34 s during the bake-off that followed), so the ratio measured the
   server's first seconds, not the bake-off;
1. ``/classify`` alone: ``--clients`` closed-loop clients for ``--seconds`` seconds, documents and
   labels from ``dev/smoke.jsonl``;
2. the same load while ``POST /v1/bakeoff`` runs on one dataset of ``dev/zeroshot_dev.jsonl``
   (``--dataset``; the label descriptions as ``labels``), until the bake-off answers.

Prints p50 / p95 / max of /classify in both phases, the p95 ratio, and the bake-off's wall time.

    python -m zsnli.bench.bakeoff_priority --model-dir ./model --json reports/bakeoff_priority.json

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

from ..harness.cli import UsageParser, non_negative_int, output_file, positive_int, positive_seconds
from ..harness.examples import DEFAULT_EXAMPLES, DEV_EXAMPLES, Example, ExamplesError, load_examples
from ..harness.server import ServerError, ServerProcess, stops_servers
from ..harness.stats import percentile
from .bench_args import check_model_dir, command_description
from .reports import write_report

ROOT = Path(__file__).resolve().parents[3]
PATCHED_SERVER = ("import sys; import zsnli.compare.service.arms_adapter as a; a.BACKGROUND_PRIORITY = int(sys.argv[1]); "
                  "from zsnli.serve import main; sys.exit(main())")


async def classify_loop(client: httpx.AsyncClient, docs: list[Example], stop: asyncio.Event, out: list[float],
                        offset: int) -> None:
    """One closed-loop client: POST /classify over ``docs`` until ``stop``; appends each latency (ms)."""
    i = offset
    while not stop.is_set():
        d = docs[i % len(docs)]
        i += 7
        t0 = time.perf_counter()
        r = await client.post("/classify", json={"text": d.text, "labels": list(d.labels)})
        r.raise_for_status()
        out.append((time.perf_counter() - t0) * 1000)


async def phase(base: str, docs: list[Example], clients: int, seconds: float, bakeoff: dict | None) -> dict:
    """/classify latencies (ms) for ``seconds`` s, or while ``bakeoff`` is POSTed and answered."""
    lat: list[float] = []
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        loops = [asyncio.create_task(classify_loop(client, docs, stop, lat, k)) for k in range(clients)]
        t0 = time.perf_counter()
        result = None
        if bakeoff is None:
            await asyncio.sleep(seconds)
        else:
            r = await client.post("/v1/bakeoff", json=bakeoff)
            r.raise_for_status()
            result = r.json()
        wall = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*loops)
    out = {"requests": len(lat), "p50_ms": round(percentile(lat, 50), 1), "p95_ms": round(percentile(lat, 95), 1),
           "max_ms": round(max(lat), 1) if lat else None, "wall_s": round(wall, 1)}
    if result is not None:
        out["bakeoff_winner"] = result["winner"]
        out["bakeoff_arms"] = {e["arm"]: e["status"] if e["status"] == "scored" else f"failed: {e.get('error')}"
                               for e in result["scorecard"]}
    return out


def bakeoff_request(rows: list[Example], dataset: str) -> dict:
    """The POST /v1/bakeoff body for one dataset: ``label<j>`` names, the dataset's descriptions as labels."""
    descriptions = rows[0].labels
    names = [f"label{j}" for j in range(len(descriptions))]
    return {"task_description": f"dev set {dataset}", "labels": dict(zip(names, descriptions)),
            "examples": [{"input": d.text, "expected": names[d.label]} for d in rows]}


def _parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    p = UsageParser(prog="python -m zsnli.bench.bakeoff_priority", description=command_description(__doc__))
    p.add_argument("--model-dir", default="./model",
                   help="the model each server serves (ZSNLI_MODEL_DIR; default: %(default)s)")
    p.add_argument("--dataset", default="news_topic",
                   help=f"dataset of {DEV_EXAMPLES} for the bake-off (default: %(default)s)")
    p.add_argument("--clients", type=positive_int, default=2,
                   help="closed-loop /classify clients (default: %(default)s)")
    p.add_argument("--seconds", type=positive_seconds, default=20.0,
                   help="length of the /classify-alone phase (default: %(default)s)")
    p.add_argument("--warmup-s", type=non_negative_int, default=30,
                   help="seconds of unmeasured /classify load first, 0: none (default: %(default)s)")
    p.add_argument("--priority", type=non_negative_int, nargs="+", default=[1, 0],
                   help="bake-off batcher priorities to try, in turn (default: %(default)s)")
    p.add_argument("--json", type=output_file, default=None,
                   help="also write the report (each priority's latencies and p95 ratio) here as JSON")
    return p


@stops_servers("python -m zsnli.bench.bakeoff_priority")
def main(argv: list[str] | None = None) -> int:
    """Run the comparison (module docstring); 0 when every run finished, 1 on a server failure, 2 on usage."""
    ap = _parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    try:
        docs = load_examples(ROOT / DEFAULT_EXAMPLES).examples
        rows = [d for d in load_examples(ROOT / DEV_EXAMPLES).examples if d.dataset == args.dataset]
    except ExamplesError as exc:
        print(f"bakeoff_priority: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"bakeoff_priority: --dataset {args.dataset!r}: no such dataset in {DEV_EXAMPLES}", file=sys.stderr)
        return 2
    bakeoff = bakeoff_request(rows, args.dataset)
    report = {"dataset": args.dataset, "examples": len(rows), "labels": len(rows[0].labels), "warmup_s": args.warmup_s,
              "clients": args.clients, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for priority in args.priority:
            env = {"ZSNLI_BAKEOFF_DB": str(Path(tmp) / f"b{priority}.sqlite3"),
                   "ZSNLI_RECEIPT_KEY": str(Path(tmp) / "key.pem"), "ZSNLI_LOG_LEVEL": "warning"}
            server = ServerProcess(["{python}", "-c", PATCHED_SERVER, str(priority)], cwd=ROOT, env=env,
                                   model_dir=args.model_dir, grace_s=60.0)
            try:
                with server:
                    server.wait_healthy(300)
                    if args.warmup_s:
                        asyncio.run(phase(server.url, docs, args.clients, args.warmup_s, None))
                    alone = asyncio.run(phase(server.url, docs, args.clients, args.seconds, None))
                    during = asyncio.run(phase(server.url, docs, args.clients, args.seconds, bakeoff))
            except ServerError as exc:
                print(f"bakeoff_priority: priority {priority}: {exc}", file=sys.stderr)
                return 1
            ratio = during["p95_ms"] / alone["p95_ms"]
            report["runs"][f"priority={priority}"] = {"alone": alone, "during_bakeoff": during,
                                                      "p95_ratio": round(ratio, 2)}
            print(f"bake-off priority {priority}: /classify p95 alone {alone['p95_ms']} ms "
                  f"(p50 {alone['p50_ms']}, n={alone['requests']}); during the bake-off {during['p95_ms']} ms "
                  f"(p50 {during['p50_ms']}, n={during['requests']}); ratio {ratio:.2f}; "
                  f"bake-off took {during['wall_s']} s", flush=True)
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
