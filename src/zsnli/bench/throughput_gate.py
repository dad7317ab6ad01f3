"""The grading-style throughput gate (what ``bench/gpu.sh`` runs).

``python -m zsnli.bench.throughput_gate [--model-dir model] [--examples FILE] [--random-deberta | --tiny] [--dry-run]``

1. What is served (`zsnli.bench.gate_plan`): by default the graded setup, ``serve.sh`` on ``--model-dir``
   (``model/``) as shipped, its calibration.json, sentence encoder and cascade, on the server's default
   device and dtype (CUDA and bf16 on a GPU); each of ``small`` and ``base`` in turn where the checkout has
   ``model/base/`` and ``ZSNLI_MODEL_VARIANT``. ``--random-deberta``: random weights of deberta-v3-base
   built offline (`zsnli.bench.random_models`; timing of that architecture). ``--tiny``: a tiny random
   deberta-v2 (CPU tests). ``--dry-run`` prints the plan and starts nothing.
2. Documents: ``--docs`` (default 4,400) cycled from the examples file, so
   their label counts follow the public examples' (2, 3, 4, 6 and 72 labels,
   a fifth each); without ``--examples`` and without ../shared, synthetic documents with the same label
   counts and text lengths (said so).
3. Each server (serve.sh, 127.0.0.1): its startup seconds to ``/health`` 200, ``--warmup`` (16) untimed
   requests, then all documents at ``--concurrency`` (32) over HTTP, every answer parsed and checked
   (`zsnli.harness.load`).
4. Prints, per arm, docs/s, pairs/s, request seconds mean/p50/p95, errors, GPU memory
   (peak used by the server's process, ``nvidia-smi``; CPU: server peak RSS), what ``/health`` says
   (device, dtype, fixed shapes, token budget, encoder) and the compute-ceiling line against a matmul rate
   measured here in the serving dtype once the servers have stopped (no contention; this process's
   CUDA context stays out of the memory figure); formula in `zsnli.bench.ceiling`.

Every flag is checked before anything starts (one line, exit 2): ``--model-dir`` a model directory, ``--repo-root``
a checkout, ``--device`` and ``--dtype`` names the server takes, ``--examples`` a readable file with examples
(`zsnli.bench.bench_args`).

Environment defaults (flags win): ``ZSNLI_BENCH_TINY=1``,
``ZSNLI_BENCH_DOCS``, ``ZSNLI_BENCH_WARMUP``, ``ZSNLI_BENCH_CONCURRENCY``,
``ZSNLI_BENCH_EXAMPLES``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ..harness.cli import UsageParser, non_negative_int, output_file, positive_float, positive_int
from ..harness.examples import SHARED_PUBLIC_EXAMPLES, Example, ExamplesError, load_examples
from ..harness.load import run_requests
from ..harness.server import start_server, stops_servers
from ..harness.stats import latency_summary, per_second
from .bench_args import (check_device, check_examples, check_file, check_model_dir, check_repo_root,
                         command_description, device_name, dtype_name)
from .ceiling import LabelTooLong, compute_ceiling, matmul_rate, pair_token_counts, param_counts
from ..runtime.devices import torch_build
from .gate_plan import GateArm, materialise, plan, render_plan
from .reports import write_report
from .resources import BackgroundSampler, RssSampler, mib

#: 503 retries per document (a throughput measurement; overload is the overload test's business)
RETRY_503 = 20

#: The public anchor: a deberta-v3-base server on one H100 under this gate (issue 5).
ANCHOR_DOCS_PER_S = 154.0

#: The public examples' shape, for synthetic documents when the file is absent: per dataset,
#: label count and text-length quantiles (characters at 0, 10, 25, 50, 75, 90, 100 %).
PUBLIC_PROFILE = {
    "emotiondair": (6, [18, 32, 49, 99, 140, 166, 256]),
    "agnews": (4, [109, 167, 201, 230, 269, 299, 476]),
    "financialphrasebank": (3, [14, 61, 81, 118, 163, 208, 306]),
    "banking77": (72, [18, 30, 38, 48, 61, 87, 182]),
    "imdb": (2, [101, 501, 691, 967, 1452, 2466, 5715]),
}
_QUANTILES = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
_WORDS = ("the market rallied after strong earnings while the team lost its match and customers asked "
          "why their card payment was declined so the film felt long but the music was great and i feel "
          "happy today because the bank refunded my transfer").split()


def gate_documents(examples: Sequence[Example], n: int) -> list[Example]:
    """``n`` documents cycled from ``examples`` (document i is example ``i mod len``), ids ``gate-i``.

    Cycling keeps the examples' label-count mix (exactly, when ``n`` is a multiple of their number).
    """
    if not examples:
        raise ValueError("no examples to cycle")
    return [replace(examples[i % len(examples)], id=f"gate-{i}") for i in range(n)]


def synthetic_examples(per_dataset: int = 100, seed: int = 0) -> list[Example]:
    """Documents shaped like the public examples (``PUBLIC_PROFILE``), for machines without the file.

    Text lengths are drawn by interpolating each dataset's length quantiles;
    labels are distinct descriptions of about the public ones' length. Order is shuffled (seeded).
    """
    rng = random.Random(seed)
    docs = []
    for name, (k, qs) in PUBLIC_PROFILE.items():
        labels = [f"This example {name} text is about topic number {j} of the benchmark" for j in range(k)]
        for i in range(per_dataset):
            u = rng.random()
            j = max(idx for idx, q in enumerate(_QUANTILES) if q <= u) if u < 1 else len(qs) - 1
            j = min(j, len(qs) - 2)
            frac = (u - _QUANTILES[j]) / (_QUANTILES[j + 1] - _QUANTILES[j])
            target = int(qs[j] + frac * (qs[j + 1] - qs[j]))
            words: list[str] = []
            while sum(len(w) + 1 for w in words) < target:
                words.append(rng.choice(_WORDS))
            docs.append(Example(f"{name}-{i}", name, " ".join(words)[:max(target, 1)], tuple(labels), 0))
    rng.shuffle(docs)
    return docs


def is_deberta_v3_base(model_dir: str | Path) -> bool:
    """True when ``model_dir/config.json`` is a deberta-v2-type model of deberta-v3-base size (12 x 768)."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (cfg.get("model_type") == "deberta-v2" and cfg.get("hidden_size") == 768
            and cfg.get("num_hidden_layers") == 12)


class GpuMemorySampler(BackgroundSampler):
    """Peak GPU memory (MiB) used by a process tree, polled with ``nvidia-smi`` every ``interval_s``.

    Falls back to the device-wide used memory when per-process figures are
    unavailable (e.g. inside containers); ``source`` says which. ``peak_mib``
    stays None without ``nvidia-smi``.
    """

    thread_name = "gpu-mem-sampler"

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self.pid = pid
        self.peak_mib: float | None = None
        self.total_mib: float | None = None
        self.source = "none"
        self.available = shutil.which("nvidia-smi") is not None

    def _pids(self) -> set[int]:
        """The sampled process and its children (the server's workers), or the process alone when psutil cannot read
        them."""
        import psutil

        try:
            p = psutil.Process(self.pid)
            return {self.pid, *(c.pid for c in p.children(recursive=True))}
        except psutil.Error:
            return {self.pid}

    def sample(self) -> None:
        """Take one sample now."""
        if not self.available:
            return
        try:
            apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=10).stdout
            pids = self._pids()
            used = 0.0
            for line in apps.splitlines():
                parts = [x.strip() for x in line.split(",")]
                try:
                    if len(parts) >= 2 and int(parts[0]) in pids:
                        used += float(parts[1])
                except ValueError:  # "[N/A]" inside some containers: fall back to the device figure
                    continue
            if used > 0:
                self.source = "server process (nvidia-smi)"
            else:
                gpu = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout.splitlines()[0].split(",")
                used, self.total_mib = float(gpu[0]), float(gpu[1])
                self.source = "whole device (nvidia-smi; per-process figure unavailable)"
            self.peak_mib = max(self.peak_mib or 0.0, used)
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass


def _env_int(ap: argparse.ArgumentParser, name: str, default: int, minimum: int = 1) -> int:
    """The integer (at least ``minimum``) in environment variable ``name``, or ``default`` when it is unset or blank;
    anything else is ``ap.error`` (one line naming the variable and its value, exit 2), not a ``ValueError``
    traceback."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        ap.error(f"{name}={raw!r}: expected a whole number of at least {minimum}, or unset it for the default "
                 f"({default})")
    return value


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option; `parse_args` checks the rest and fills
    the defaults of ``--docs``, ``--warmup`` and ``--concurrency``. ``--examples`` and ``--tiny`` default to
    ``ZSNLI_BENCH_EXAMPLES`` and ``ZSNLI_BENCH_TINY`` as set when it is called."""
    tiny_env = os.environ.get("ZSNLI_BENCH_TINY", "").strip().lower() in ("1", "true", "yes", "on")
    ap = UsageParser(prog="python -m zsnli.bench.throughput_gate", description=command_description(__doc__))
    ap.add_argument("--model-dir", default="model",
                    help="the model served as serve.sh serves it, its calibration.json included; needs config.json "
                         "unless --tiny or --random-deberta (default: %(default)s)")
    ap.add_argument("--examples", default=os.environ.get("ZSNLI_BENCH_EXAMPLES") or None,
                    help=f"examples JSONL (DESIGN.md format) or hub:btzsc whose documents are cycled (default: "
                         f"{SHARED_PUBLIC_EXAMPLES} where the team's shared data is mounted, else synthetic documents "
                         "with the public examples' label counts and text lengths)")
    ap.add_argument("--tiny", action="store_true", default=tiny_env,
                    help="tiny random deberta-v2 and few documents (CPU smoke test); env ZSNLI_BENCH_TINY=1")
    ap.add_argument("--docs", type=positive_int, default=None, help="documents (default $ZSNLI_BENCH_DOCS, else 4400; tiny: 24)")
    ap.add_argument("--warmup", type=non_negative_int, default=None, help="untimed warm-up requests (default $ZSNLI_BENCH_WARMUP, else 16; tiny: 4)")
    ap.add_argument("--concurrency", type=positive_int, default=None, help="concurrent requests (default $ZSNLI_BENCH_CONCURRENCY, else 32; tiny: 8)")
    ap.add_argument("--random-deberta", action="store_true",
                    help="serve a random-weight deberta-v3-base built offline instead of --model-dir (timing only)")
    ap.add_argument("--dry-run", action="store_true", help="print what would be served and the load; start nothing")
    ap.add_argument("--device", type=device_name, default=None, help="ZSNLI_DEVICE for the server (default: the server's, cuda when "
                                                   "available, else cpu)")
    ap.add_argument("--dtype", type=dtype_name, default=None, help="ZSNLI_DTYPE for the server (default: the server's, bfloat16 on "
                                                 "a bf16 GPU, float32 on a CPU)")
    ap.add_argument("--allow-cpu", action="store_true", help="run the full-size gate without a GPU")
    ap.add_argument("--work-dir", default=None, help="where a random model is built (default: a temp dir)")
    ap.add_argument("--launcher", choices=("auto", "serve.sh", "uvicorn"), default="auto",
                    help="how each server is started: serve.sh of --repo-root, or uvicorn on the app factory; "
                         "auto: serve.sh where it exists, else uvicorn (default: %(default)s)")
    ap.add_argument("--repo-root", default=".", help="where serve.sh lives (default: %(default)s)")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch threads of this process (the matmul rate) and of each server (OMP/MKL and "
                         "ZSNLI_TORCH_THREADS); default: leave the environment's")
    ap.add_argument("--matmul-n", type=positive_int, default=None,
                    help="matmul side for the rate of the compute ceiling (default: 1024 on a CPU, 8192 on CUDA)")
    ap.add_argument("--matmul-seconds", type=positive_float, default=2.0,
                    help="seconds at least that the matmul measuring the compute ceiling's rate repeats, in the "
                         "serving dtype (default: %(default)s)")
    ap.add_argument("--out", type=output_file, default=None, help="write the JSON result here")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar of the requests on stderr")
    return ap


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """CLI arguments; ``--tiny`` changes the defaults to a tiny model and few documents."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.tiny and args.random_deberta:
        ap.error("--tiny and --random-deberta: choose one random model")
    if not (args.tiny or args.random_deberta):
        check_model_dir(ap, args.model_dir, hint="the gate serves it as serve.sh would; --random-deberta serves a "
                        "random-weight deberta-v3-base instead")
    check_repo_root(ap, args.repo_root)
    if args.examples and not args.examples.startswith("hub:"):
        check_file(ap, args.examples, "--examples", "pass --examples PATH (JSONL as docs/bakeoff.md's 'The "
                   "examples file' says) or --examples hub:btzsc, or leave it out for the shared/synthetic default")
    check_examples(ap, args.examples)  # read now: an empty file ended the run with exit 1
    check_device(ap, args.device)
    if args.docs is None:
        args.docs = _env_int(ap, "ZSNLI_BENCH_DOCS", 24 if args.tiny else 4400)
    if args.warmup is None:
        args.warmup = _env_int(ap, "ZSNLI_BENCH_WARMUP", 4 if args.tiny else 16, minimum=0)
    if args.concurrency is None:
        args.concurrency = _env_int(ap, "ZSNLI_BENCH_CONCURRENCY", 8 if args.tiny else 32)
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare the model and documents, start the server, run the gate; returns the result dict.

    A random model built without ``--work-dir`` goes to a temporary directory removed at the end.
    """
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="zsnli-gate-"))
    try:
        return _run(args, work)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def gate_examples(given: str | None) -> tuple[list[Example], str]:
    """The examples to cycle and a note saying which: ``given``, else the shared public examples when
    mounted, else `synthetic_examples`. Exits (one line) when ``given`` cannot be read."""
    source = given or (SHARED_PUBLIC_EXAMPLES if Path(SHARED_PUBLIC_EXAMPLES).is_file() else None)
    if not source:
        return synthetic_examples(), f"SYNTHETIC, shaped like the public examples ({SHARED_PUBLIC_EXAMPLES} not found)"
    try:
        examples = load_examples(source).examples
    except ExamplesError as exc:
        raise SystemExit(f"zsnli.bench: {exc}") from None
    return examples, f"cycled from {source} ({len(examples)} examples)"


def _serve_arm(arm: GateArm, args: argparse.Namespace, docs: list[Example], say) -> dict[str, Any]:
    """One arm: start its server, send the warm-ups and ``docs``, stop it. Returns the arm's figures (the
    ceiling is added once the matmul rate is known)."""
    weights = arm.weights_dir
    params = param_counts(weights)
    try:
        tokens = pair_token_counts(weights, docs)  # a label that cannot fit stops the run before anything starts
    except LabelTooLong as exc:
        raise SystemExit(f"zsnli.bench: {exc} (the server would answer 422): choose documents whose labels fit")
    settings = " ".join(f"{k}={v}" for k, v in sorted(arm.env.items())) or "serve.sh's defaults"
    say(f"[gate] arm {arm.name}: starting serve.sh ({settings}) on {arm.model_dir}")
    with start_server(arm.model_dir, {"ZSNLI_LOG_LEVEL": "warning", **arm.env}, args.launcher, args.repo_root,
                      args.threads) as server:
        with RssSampler(server.pid) as rss, GpuMemorySampler(server.pid) as gpu_mem:
            load = run_requests(server.url, docs, concurrency=args.concurrency, warmups=args.warmup,
                                progress=not args.no_progress, desc=f"gate {arm.name} c={args.concurrency}",
                                request_timeout=600.0, retry_503=RETRY_503)
        health, launcher, startup_s = server.health, server.launcher, server.startup_s
    lat = latency_summary(load.seconds)
    pairs = sum(len(d.labels) for d in docs)
    return {
        "arm": arm.name, "model_dir": str(arm.model_dir), "model": arm.note, "random_weights": arm.random is not None,
        "settings": arm.env, "docs": len(docs), "pairs": pairs,
        "label_counts": {str(k): v for k, v in sorted(Counter(len(d.labels) for d in docs).items())},
        "concurrency": args.concurrency, "warmup": args.warmup, "launcher": launcher, "startup_s": startup_s,
        "health": health, "device": health.get("device"), "dtype": health.get("dtype"),
        "wall_s": load.wall_s, "docs_per_s": per_second(len(docs), load.wall_s),
        "pairs_per_s": per_second(pairs, load.wall_s),
        "request_s": {k: lat[k] for k in ("mean_s", "p50_s", "p95_s", "max_s")},
        "errors": load.error_counts(), "retries_503": load.retries_503,
        "server_peak_rss_mib": mib(rss.peak_bytes), "gpu_memory_peak_mib": gpu_mem.peak_mib,
        "gpu_memory_source": gpu_mem.source, "params": params.to_dict(), "_tokens": tokens, "_params": params,
        "anchor_docs_per_s": ANCHOR_DOCS_PER_S, "anchor_comparable": bool(
            str(health.get("device", "")).startswith("cuda") and is_deberta_v3_base(weights) and arm.random != "deberta-tiny"),
    }


def _run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """`run`'s body, with its scratch files in ``work``: the device, the documents, each planned arm served and
    driven, then the matmul rate and each arm's share of its ceiling; returns the report."""
    import torch

    say = lambda msg: print(msg, flush=True)  # noqa: E731
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = device.startswith("cuda")
    if not on_gpu and not args.tiny and not args.allow_cpu:
        raise SystemExit("no CUDA GPU found: the gate is meant for a GPU; use --tiny (CPU smoke run) or --allow-cpu")
    if args.threads:
        torch.set_num_threads(args.threads)

    say(f"[gate] {torch_build()}")
    examples, doc_note = gate_examples(args.examples)
    docs = gate_documents(examples, args.docs)
    arms = [materialise(a, work, examples, args.model_dir, say) for a in plan(args)]
    for arm in arms:
        say(f"[gate] arm {arm.name}: {arm.note}")
    results = [_serve_arm(arm, args, docs, say) for arm in arms]

    # the matmul rate after the servers are gone: no contention, and this process's own CUDA
    # context never shows in the GPU memory figure
    dtype = args.dtype or results[0]["dtype"] or ("bfloat16" if on_gpu else "float32")
    say(f"[gate] measuring the {dtype} matmul rate on {device}")
    rate = matmul_rate(device, dtype, n=args.matmul_n, min_time_s=args.matmul_seconds, threads=args.threads)
    for r in results:
        r["ceiling"] = compute_ceiling(r.pop("_tokens"), r.pop("_params"), rate["flops_per_s"])
        r["fraction_of_ceiling"] = r["docs_per_s"] / r["ceiling"]["ceiling_docs_per_s"]
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "documents": doc_note,
            "device": device, "device_name": torch.cuda.get_device_name(torch.device(device)) if on_gpu else "cpu",
            "matmul": rate, "arms": results}


def render(r: dict[str, Any]) -> str:
    """The gate's printed summary (plain text, one figure a line; a block per arm)."""
    m = r["matmul"]
    lines = ["== zsnli throughput gate ==", f"device: {r['device']} ({r['device_name']}); documents: {r['documents']}",
             f"matmul: {m['dtype']} {m['flops_per_s'] / 1e12:.2f} TFLOP/s measured (n={m['n']})"]
    for a in r["arms"]:
        lat, c, p, h = a["request_s"], a["ceiling"], a["params"], a["health"]
        mem = (f"GPU memory: peak {a['gpu_memory_peak_mib']:.0f} MiB ({a['gpu_memory_source']})"
               if a["gpu_memory_peak_mib"] is not None else "GPU memory: n/a (no nvidia-smi)")
        encoder = h.get("encoder") or {}
        lines += [
            f"-- arm {a['arm']}: {a['model']}",
            f"served: device {a['device']}, dtype {a['dtype']}, fixed shapes {h.get('fixed_shapes')}, token budget "
            f"{h.get('token_budget')}, rows per forward {h.get('max_rows') or 'budget // width'}, encoder "
            + (f"{encoder.get('dtype')}{' (TF32)' if encoder.get('tf32') else ''}" if encoder else "none")
            + f"; launcher {a['launcher']}",
            f"startup: {a['startup_s']:.1f} s to /health 200",
            f"documents: {a['docs']}, {a['pairs']} pairs (labels sent), label counts {a['label_counts']}; "
            f"concurrency {a['concurrency']}, warm-ups {a['warmup']}",
            f"throughput: {a['docs_per_s']:.2f} docs/s, {a['pairs_per_s']:.1f} pairs/s (wall {a['wall_s']:.2f} s)",
            f"request seconds: mean {lat['mean_s']:.4f}, p50 {lat['p50_s']:.4f}, p95 {lat['p95_s']:.4f}, "
            f"max {lat['max_s']:.4f}",
            f"answers: {a['docs'] - sum(a['errors'].values())} of {a['docs']} parsed and valid; errors: "
            f"{a['errors'] or 'none'}; 503 retries: {a['retries_503']}",
            mem,
            f"server peak RSS: {a['server_peak_rss_mib']:.0f} MiB",
            (f"compute ceiling, every label through the NLI model (the served default computes less: cascade, cosine "
             f"term): FLOPs/pair = 2 x {p['per_token']:,} encoder params x L + 2 x {p['per_pair']:,} head params; mean "
             f"L {c['mean_tokens_per_pair']:.1f} tokens, {c['flops_per_doc'] / 1e9:.2f} GFLOP/doc -> ceiling "
             f"{c['ceiling_docs_per_s']:.1f} docs/s; measured {a['docs_per_s']:.2f} docs/s = "
             f"{100 * a['fraction_of_ceiling']:.1f}% of it"),
            f"anchor: {a['anchor_docs_per_s']:.0f} docs/s (deberta-v3-base server, one H100) -> "
            f"{a['docs_per_s'] / a['anchor_docs_per_s']:.2f}x"
            + ("" if a["anchor_comparable"] else " (not the anchor's model: a deberta-v3-base on a GPU)"),
        ]
    return "\n".join(lines)


@stops_servers("python -m zsnli.bench.throughput_gate")
def main(argv: Sequence[str] | None = None) -> int:
    """Run the gate (or print its plan with ``--dry-run``), print the summary, write ``--out``; exit 1 when any
    request failed."""
    args = parse_args(argv)
    if args.dry_run:
        examples, doc_note = gate_examples(args.examples)
        print(render_plan(plan(args), args.docs, doc_note, args.warmup, args.concurrency), flush=True)
        return 0
    result = run(args)
    print(render(result), flush=True)
    write_report(args.out, result)  # --out was checked before the run (`zsnli.harness.cli.output_file`)
    return 1 if any(a["errors"] for a in result["arms"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
