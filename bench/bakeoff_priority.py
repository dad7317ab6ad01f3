"""/classify latency while a bake-off runs (issue 16): the bake-off's NLI pairs go through the same
batcher at a lower priority. Against 127.0.0.1 only; bounded; stops the servers it starts.

For each ``--priority`` value P (default ``1 0``: the shipped background priority, then equal priority
for comparison), a server (``server.py``, this interpreter) is started with the bake-off arms' batcher
priority patched to P, then:

1. ``/classify`` alone: ``--clients`` closed-loop clients for ``--seconds`` seconds, documents and
   labels from ``dev/smoke.jsonl``;
2. the same load while ``POST /v1/bakeoff`` runs on one dataset of ``dev/zeroshot_dev.jsonl``
   (``--dataset``; the label descriptions as ``labels``), until the bake-off answers.

Prints p50 / p95 / max of /classify in both phases, their ratio, and the bake-off's wall time.

    python bench/bakeoff_priority.py --model-dir ./model --json reports/bakeoff_priority.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PATCHED_SERVER = ("import sys; import zsnli.bakeoff.arms_adapter as a; a.BACKGROUND_PRIORITY = int(sys.argv[1]); "
                  "from zsnli.app import main; sys.exit(main())")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))]


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def classify_loop(client: httpx.AsyncClient, docs: list[dict], stop: asyncio.Event, out: list[float],
                        offset: int) -> None:
    i = offset
    while not stop.is_set():
        d = docs[i % len(docs)]
        i += 7
        t0 = time.perf_counter()
        r = await client.post("/classify", json={"text": d["text"], "labels": d["labels"]})
        r.raise_for_status()
        out.append((time.perf_counter() - t0) * 1000)


async def phase(base: str, docs: list[dict], clients: int, seconds: float, bakeoff: dict | None) -> dict:
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
           "max_ms": round(max(lat), 1), "wall_s": round(wall, 1)}
    if result is not None:
        out["bakeoff_winner"] = result["winner"]
        out["bakeoff_arms"] = {e["arm"]: e["status"] for e in result["scorecard"]}
    return out


def start_server(model_dir: str, priority: int, tmp: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port), "ZSNLI_MODEL_DIR": model_dir,
           "ZSNLI_BAKEOFF_DB": str(tmp / f"b{priority}.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp / "key.pem"),
           "ZSNLI_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", PATCHED_SERVER, str(priority)], cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not become ready in 300 s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", default="./model")
    p.add_argument("--dataset", default="news_topic", help="dataset of dev/zeroshot_dev.jsonl for the bake-off")
    p.add_argument("--clients", type=int, default=2, help="closed-loop /classify clients (default 2)")
    p.add_argument("--seconds", type=float, default=20.0, help="length of the /classify-alone phase")
    p.add_argument("--priority", type=int, nargs="+", default=[1, 0], help="bake-off batcher priorities to try")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    docs = load_jsonl(ROOT / "dev" / "smoke.jsonl")
    rows = [d for d in load_jsonl(ROOT / "dev" / "zeroshot_dev.jsonl") if d["dataset"] == args.dataset]
    if not rows:
        raise SystemExit(f"--dataset {args.dataset!r}: no such dataset in dev/zeroshot_dev.jsonl")
    descriptions = rows[0]["labels"]
    names = [f"label{j}" for j in range(len(descriptions))]
    bakeoff = {"task_description": f"dev set {args.dataset}", "labels": dict(zip(names, descriptions)),
               "examples": [{"input": d["text"], "expected": names[d["label"]]} for d in rows]}
    report = {"dataset": args.dataset, "examples": len(rows), "labels": len(names), "clients": args.clients,
              "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for priority in args.priority:
            proc, base = start_server(args.model_dir, priority, Path(tmp))
            try:
                alone = asyncio.run(phase(base, docs, args.clients, args.seconds, None))
                during = asyncio.run(phase(base, docs, args.clients, args.seconds, bakeoff))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            ratio = during["p95_ms"] / alone["p95_ms"]
            report["runs"][f"priority={priority}"] = {"alone": alone, "during_bakeoff": during,
                                                      "p95_ratio": round(ratio, 2)}
            print(f"bake-off priority {priority}: /classify p95 alone {alone['p95_ms']} ms "
                  f"(p50 {alone['p50_ms']}, n={alone['requests']}); during the bake-off {during['p95_ms']} ms "
                  f"(p50 {during['p50_ms']}, n={during['requests']}); ratio {ratio:.2f}; "
                  f"bake-off took {during['wall_s']} s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
