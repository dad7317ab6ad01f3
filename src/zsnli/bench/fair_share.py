"""A small client beside one large array (issue 31): is the queue shared fairly? Against 127.0.0.1 only;
bounded; stops the server it starts.

One server (`zsnli.harness.server.ServerProcess` running ``serve.sh`` of ``--repo``, default this
checkout) with ``ZSNLI_MAX_REQUEST_PAIRS`` raised to the array's pairs so that the array is accepted
(the default cap, 8192, refuses a 64 x 256 array with 413 at once), then:

1. **alone**: one closed-loop client sends small ``POST /classify`` requests (documents and labels of
   ``dev/smoke.jsonl``; no retries) for ``--alone-s`` seconds;
2. **beside the array**: the same client while one ``POST /classify`` JSON array of ``--items`` x
   ``--labels`` (random-word texts of ``--text-chars`` characters, `zsnli.bench.overload.make_request`;
   ``multi_label`` with ``--multi-label``) is posted, until the array is answered; or, with
   ``--array-clients N``, while N clients each post that array again and again for ``--loop-s``
   seconds (issue 39's case: six clients looping on 16 x 32 multi-label arrays).

Prints, for each phase, the small client's requests, success rate (200s / requests), p50 / p95 / max
latency of its 200s, and its other statuses; for the array: its wall time, and its items answered
and failed (by status). ``--repo /path/to/other/checkout`` measures another checkout's server (the
code before a change) with the same client and the same requests.

    python -m zsnli.bench.fair_share --model-dir ./model --json reports/fair_share.json
    python -m zsnli.bench.fair_share --items 16 --labels 64 --alone-s 5   # a quick look
    python -m zsnli.bench.fair_share --items 16 --labels 32 --multi-label --array-clients 6 --loop-s 60

Imports httpx, `zsnli.harness` (examples, server, stats, cli), `zsnli.bench.overload` (the request
maker) and `zsnli.bench.bench_args` (the model directory check); the server only over HTTP.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path

import httpx

from ..harness.cli import (
    path_type,
    UsageParser, non_negative_int, number_type, output_file, positive_int, positive_seconds,
)
from ..harness.examples import DEFAULT_EXAMPLES, Example, ExamplesError, load_examples
from ..harness.server import ServerError, ServerProcess, stops_servers
from ..harness.stats import percentile
from .bench_args import check_model_dir, command_description
from .overload import make_request
from .reports import write_report

ROOT = Path(__file__).resolve().parents[3]


async def small_client(client: httpx.AsyncClient, docs: list[Example], stop: asyncio.Event, out: list) -> None:
    """Closed loop of single ``/classify`` requests over ``docs`` until ``stop``; appends
    ``(status or error name, seconds)`` for each (no retries: a 503 counts as a failure)."""
    i = 0
    while not stop.is_set():
        d = docs[i % len(docs)]
        i += 1
        t0 = time.perf_counter()
        try:
            r = await client.post("/classify", json={"id": i, "text": d.text, "labels": list(d.labels)})
            status: object = r.status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        out.append((status, time.perf_counter() - t0))


def summary(answers: list) -> dict:
    """The small client's figures: requests, success rate, p50/p95/max of the 200s (ms), other statuses."""
    ok = [s * 1000 for status, s in answers if status == 200]
    others: dict[str, int] = {}
    for status, _ in answers:
        if status != 200:
            others[str(status)] = others.get(str(status), 0) + 1
    return {"requests": len(answers), "success_rate": round(len(ok) / len(answers), 3) if answers else None,
            "p50_ms": round(percentile(ok, 50), 1) if ok else None,
            "p95_ms": round(percentile(ok, 95), 1) if ok else None,
            "max_ms": round(max(ok), 1) if ok else None, "other_statuses": others}


def array_figures(r: httpx.Response, t0: float) -> dict:
    """One array's answer: its status, wall seconds and its items by outcome ("200", or status and error_type)."""
    items: dict[str, int] = {}
    for entry in (r.json() if r.status_code == 200 else []):
        key = "200" if "probabilities" in entry else f"{entry.get('status')} {entry.get('error_type')}"
        items[key] = items.get(key, 0) + 1
    return {"status": r.status_code, "wall_s": round(time.perf_counter() - t0, 1), "items": items}


async def post_array(big: httpx.AsyncClient, array: list[dict]) -> dict:
    """Post ``array`` once; its figures (`array_figures`), or the error's name when it was not answered."""
    t0 = time.perf_counter()
    try:
        return array_figures(await big.post("/classify", json=array), t0)
    except httpx.HTTPError as exc:  # e.g. not answered within --array-timeout
        return {"status": type(exc).__name__, "wall_s": round(time.perf_counter() - t0, 1)}


async def looping_arrays(big: httpx.AsyncClient, array: list[dict], clients: int, loop_s: float) -> dict:
    """``clients`` closed loops, each posting ``array`` until ``loop_s`` seconds have passed (an array in
    flight then is awaited); the arrays answered, by status."""
    deadline = time.perf_counter() + loop_s
    statuses: dict[str, int] = {}

    async def one() -> None:
        while time.perf_counter() < deadline:
            status = str((await post_array(big, array))["status"])
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(one() for _ in range(clients)))
    return {"clients": clients, "loop_s": loop_s, "arrays_by_status": statuses}


async def phases(base: str, docs: list[Example], array: list[dict], alone_s: float, array_timeout: float,
                 clients: int = 1, loop_s: float = 0.0) -> dict:
    """Phase 1 (alone, ``alone_s`` s) and phase 2: beside ``array`` until it is answered or ``array_timeout``
    seconds pass, or, with ``loop_s`` > 0, beside ``clients`` clients looping on it (`looping_arrays`)."""
    report = {}
    async with httpx.AsyncClient(base_url=base, timeout=120) as client, \
            httpx.AsyncClient(base_url=base, timeout=array_timeout) as big:
        for name in ("alone", "beside_array"):
            answers: list = []
            stop = asyncio.Event()
            loop = asyncio.create_task(small_client(client, docs, stop, answers))
            t0 = time.perf_counter()
            if name == "alone":
                await asyncio.sleep(alone_s)
            elif loop_s > 0:
                report["arrays"] = await looping_arrays(big, array, clients, loop_s)
            else:
                report["array"] = await post_array(big, array)
            stop.set()
            await loop
            report[name] = {**summary(answers), "wall_s": round(time.perf_counter() - t0, 1)}
    return report


def _parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    p = UsageParser(prog="python -m zsnli.bench.fair_share", description=command_description(__doc__))
    p.add_argument("--model-dir", default="./model",
                   help="the model the server serves (ZSNLI_MODEL_DIR; default: %(default)s)")
    p.add_argument("--repo", type=path_type, default=ROOT,
                   help="checkout whose serve.sh and src/ are measured (default: this one, %(default)s)")
    p.add_argument("--items", type=positive_int, default=64,
                   help="documents in the large array (default: %(default)s)")
    p.add_argument("--labels", type=positive_int, default=256,
                   help="labels of each array document (default: %(default)s)")
    p.add_argument("--text-chars", type=positive_int, default=200,
                   help="characters of each array document; 200 is about 40 tokens (default: %(default)s)")
    p.add_argument("--alone-s", type=positive_seconds, default=20.0,
                   help="length of the small-client-alone phase (default: %(default)s)")
    p.add_argument("--array-timeout", type=positive_seconds, default=1800.0,
                   help="seconds the array may take; past it the report says so (default: %(default)s)")
    p.add_argument("--multi-label", action="store_true", help="the array's documents are multi_label")
    p.add_argument("--array-clients", type=positive_int, default=1,
                   help="clients looping on the array during --loop-s (default: %(default)s)")
    p.add_argument("--loop-s", type=number_type(float, 0.0), default=0.0,
                   help="seconds the array clients loop; 0: the array is posted once (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the array's random-word texts and labels (default: %(default)s)")
    p.add_argument("--json", type=output_file, default=None,
                   help="also write the report (both phases and the array) here as JSON")
    return p


@stops_servers("python -m zsnli.bench.fair_share")
def main(argv: list[str] | None = None) -> int:
    """Run both phases (module docstring); 0 when they finished, 1 on a server failure, 2 on usage."""
    ap = _parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    if not (args.repo / "serve.sh").is_file():
        print(f"fair_share: --repo {args.repo}: no serve.sh there", file=sys.stderr)
        return 2
    try:
        docs = load_examples(ROOT / DEFAULT_EXAMPLES).examples
    except ExamplesError as exc:
        print(f"fair_share: {exc}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    array = [make_request(i, args.labels, rng, args.text_chars) for i in range(args.items)]
    for entry in array if args.multi_label else ():
        entry["multi_label"] = True
    pairs = args.items * args.labels
    env = {"ZSNLI_MAX_REQUEST_PAIRS": str(max(pairs, 8192)), "ZSNLI_LOG_LEVEL": "warning"}
    server = ServerProcess(["bash", str(args.repo / "serve.sh")], cwd=args.repo, env=env,
                           model_dir=Path(args.model_dir).resolve(), grace_s=60.0)
    try:
        with server:
            server.wait_healthy(300)
            report = asyncio.run(phases(server.url, docs, array, args.alone_s, args.array_timeout,
                                        args.array_clients, args.loop_s))
    except ServerError as exc:
        print(f"fair_share: {exc}", file=sys.stderr)
        return 1
    report = {"repo": str(args.repo), "array_shape": f"{args.items} x {args.labels} ({pairs} pairs), "
              f"texts of {args.text_chars} characters{', multi_label' if args.multi_label else ''}", **report}
    for key, value in report.items():
        print(f"{key:>14}: {value}", flush=True)
    alone, beside = report["alone"], report["beside_array"]
    if alone["p95_ms"] and beside["p95_ms"]:
        print(f"small client p95 beside the array / alone: {beside['p95_ms'] / alone['p95_ms']:.2f}x; "
              f"success {beside['success_rate']} (alone {alone['success_rate']}); "
              f"array: {report.get('array') or report.get('arrays')}", flush=True)
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
