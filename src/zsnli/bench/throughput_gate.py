"""The grading-style throughput gate (what ``bench/gpu.sh`` runs).

``python -m zsnli.bench.throughput_gate [--model-dir model] [--examples FILE] [--tiny]``

1. Model: ``--model-dir`` when it is a deberta-v3-base-architecture model
   (``model_type`` deberta-v2, 12 layers x 768); otherwise random weights of
   that architecture built offline (`zsnli.bench.random_models`), said so in the
   output. ``--tiny`` builds a tiny deberta-v2 instead (CPU tests).
2. Documents: ``--docs`` (default 4,400) cycled from the examples file, so
   their label counts follow the public examples' (2, 3, 4, 6 and 72 labels,
   a fifth each); without ``--examples`` and without ../shared, synthetic documents with the same label
   counts and text lengths (said so).
3. The server (serve.sh, 127.0.0.1) on CUDA in bf16 when a GPU is present
   (``--device``/``--dtype`` override), ``--warmup`` (16) untimed requests,
   then all documents at ``--concurrency`` (32) over HTTP.
4. Prints docs/s, pairs/s, request seconds mean/p50/p95, errors, GPU memory
   (peak used by the server's process, ``nvidia-smi``; CPU: server peak RSS)
   and the compute-ceiling line against a matmul rate measured here in the
   serving dtype once the server has stopped (no contention; this process's
   CUDA context stays out of the memory figure); formula in `zsnli.bench.ceiling`.

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

from ..harness.cli import UsageParser, non_negative_int, positive_float, positive_int
from ..harness.examples import SHARED_PUBLIC_EXAMPLES, Example, ExamplesError, load_examples
from ..harness.load import run_requests
from ..harness.server import start_server
from ..harness.stats import latency_summary, per_second
from .ceiling import LabelTooLong, compute_ceiling, matmul_rate, pair_token_counts, param_counts
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


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """CLI arguments; ``--tiny`` changes the defaults to a tiny model and few documents."""
    tiny_env = os.environ.get("ZSNLI_BENCH_TINY", "").strip().lower() in ("1", "true", "yes", "on")
    ap = UsageParser(prog="python -m zsnli.bench.throughput_gate", description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--examples", default=os.environ.get("ZSNLI_BENCH_EXAMPLES") or None,
                    help=f"examples JSONL (DESIGN.md format) or hub:btzsc whose documents are cycled (default: "
                         f"{SHARED_PUBLIC_EXAMPLES} where the team's shared data is mounted, else synthetic documents "
                         "with the public examples' label counts and text lengths)")
    ap.add_argument("--tiny", action="store_true", default=tiny_env,
                    help="tiny random deberta-v2 and few documents (CPU smoke test); env ZSNLI_BENCH_TINY=1")
    ap.add_argument("--docs", type=positive_int, default=None, help="documents (default 4400; tiny: 24)")
    ap.add_argument("--warmup", type=non_negative_int, default=None, help="untimed warm-up requests (default 16; tiny: 4)")
    ap.add_argument("--concurrency", type=positive_int, default=None, help="concurrent requests (default 32; tiny: 8)")
    ap.add_argument("--device", default=None, help="server device (default cuda when available, else cpu)")
    ap.add_argument("--dtype", default=None, help="server dtype (default bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--allow-cpu", action="store_true", help="run the full-size gate without a GPU")
    ap.add_argument("--work-dir", default=None, help="where a random model is built (default: a temp dir)")
    ap.add_argument("--launcher", choices=("auto", "serve.sh", "uvicorn"), default="auto")
    ap.add_argument("--repo-root", default=".")
    ap.add_argument("--threads", type=positive_int, default=None)
    ap.add_argument("--matmul-n", type=positive_int, default=None)
    ap.add_argument("--matmul-seconds", type=positive_float, default=2.0)
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.examples and not args.examples.startswith("hub:") and not Path(args.examples).is_file():
        ap.error(f"--examples: no such file {args.examples}; pass --examples PATH (JSONL in DESIGN.md's examples "
                 "format) or --examples hub:btzsc, or leave it out for the shared/synthetic default")
    if args.docs is None:
        args.docs = _env_int("ZSNLI_BENCH_DOCS", 24 if args.tiny else 4400)
    if args.warmup is None:
        args.warmup = _env_int("ZSNLI_BENCH_WARMUP", 4 if args.tiny else 16)
    if args.concurrency is None:
        args.concurrency = _env_int("ZSNLI_BENCH_CONCURRENCY", 8 if args.tiny else 32)
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


def gate_model(args: argparse.Namespace, work: Path, examples: Sequence[Example], say) -> tuple[Path, str, bool]:
    """(model directory, note, random weights?): ``--model-dir`` when it is a deberta-v3-base
    architecture, else a random-weight model built offline in ``work`` (tiny with ``--tiny``)."""
    if not args.tiny and is_deberta_v3_base(args.model_dir):
        model_dir = Path(args.model_dir).resolve()
        return model_dir, f"{model_dir} (trained deberta-v3-base-architecture model)", False
    from .random_models import build_random_nli

    arch = "deberta-tiny" if args.tiny else "deberta-v3-base"
    why = "--tiny" if args.tiny else f"{args.model_dir} is not a deberta-v3-base-architecture model"
    say(f"[gate] building a RANDOM-WEIGHT {arch} model offline ({why}) in {work / 'model'}")
    corpus = [t for d in examples for t in (d.text, *d.labels)]
    info = build_random_nli(work / "model", arch, tokenizer_from=None if args.tiny else args.model_dir, corpus=corpus)
    note = (f"RANDOM WEIGHTS, {arch} architecture ({info['parameters'] / 1e6:.1f}M parameters; timing only, "
            f"not accuracy); tokenizer: {info['tokenizer']}")
    return Path(info["model_dir"]).resolve(), note, True


def _run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    say = lambda msg: print(msg, flush=True)  # noqa: E731
    cuda = torch.cuda.is_available()
    device = args.device or ("cuda" if cuda else "cpu")
    on_gpu = device.startswith("cuda")
    dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
    if not on_gpu and not args.tiny and not args.allow_cpu:
        raise SystemExit("no CUDA GPU found: the gate is meant for a GPU; use --tiny (CPU smoke run) or --allow-cpu")
    if args.threads:
        torch.set_num_threads(args.threads)

    examples, doc_note = gate_examples(args.examples)
    docs = gate_documents(examples, args.docs)
    counts = Counter(len(d.labels) for d in docs)
    model_dir, model_note, random_weights = gate_model(args, work, examples, say)
    say(f"[gate] model: {model_note}")

    # token counts first: a label that cannot fit stops the run before anything starts
    params = param_counts(model_dir)
    try:
        tokens = pair_token_counts(model_dir, docs)
    except LabelTooLong as exc:
        raise SystemExit(f"zsnli.bench: {exc} (the server would answer 422): choose documents whose labels fit")

    settings = {"ZSNLI_DEVICE": device, "ZSNLI_DTYPE": dtype}
    say(f"[gate] starting the server on {device}, {dtype}")
    with start_server(model_dir, {"ZSNLI_LOG_LEVEL": "warning", **settings}, args.launcher, args.repo_root,
                      args.threads) as server:
        with RssSampler(server.pid) as rss, GpuMemorySampler(server.pid) as gpu_mem:
            load = run_requests(server.url, docs, concurrency=args.concurrency, warmups=args.warmup,
                                progress=not args.no_progress, desc=f"gate c={args.concurrency}",
                                request_timeout=600.0, retry_503=RETRY_503)
        health = server.health
        launcher = server.launcher

    # the matmul rate after the server is gone: no contention, and this process's own CUDA
    # context never shows in the GPU memory figure
    say(f"[gate] measuring the {dtype} matmul rate on {device}")
    rate = matmul_rate(device, dtype, n=args.matmul_n, min_time_s=args.matmul_seconds, threads=args.threads)
    ceiling = compute_ceiling(tokens, params, rate["flops_per_s"])
    device_name = torch.cuda.get_device_name(torch.device(device)) if on_gpu else "cpu"
    lat = latency_summary(load.seconds)
    lat = {k: lat[k] for k in ("mean_s", "p50_s", "p95_s", "max_s")}
    pairs = sum(len(d.labels) for d in docs)
    docs_per_s = per_second(len(docs), load.wall_s)
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_dir": str(model_dir),
        "model": model_note,
        "random_weights": random_weights,
        "documents": doc_note,
        "docs": len(docs),
        "pairs": pairs,
        "label_counts": {str(k): v for k, v in sorted(counts.items())},
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "device": device,
        "device_name": device_name,
        "dtype": dtype,
        "launcher": launcher,
        "health": health,
        "wall_s": load.wall_s,
        "docs_per_s": docs_per_s,
        "pairs_per_s": per_second(pairs, load.wall_s),
        "request_s": lat,
        "errors": load.error_counts(),
        "retries_503": load.retries_503,
        "server_peak_rss_mib": mib(rss.peak_bytes),
        "gpu_memory_peak_mib": gpu_mem.peak_mib,
        "gpu_memory_source": gpu_mem.source,
        "params": params.to_dict(),
        "matmul": rate,
        "ceiling": ceiling,
        "fraction_of_ceiling": docs_per_s / ceiling["ceiling_docs_per_s"],
        "anchor_docs_per_s": ANCHOR_DOCS_PER_S,
    }


def render(r: dict[str, Any]) -> str:
    """The gate's printed summary (plain text, one figure a line)."""
    lat, c, m, p = r["request_s"], r["ceiling"], r["matmul"], r["params"]
    mem = (f"GPU memory: peak {r['gpu_memory_peak_mib']:.0f} MiB ({r['gpu_memory_source']})"
           if r["gpu_memory_peak_mib"] is not None else "GPU memory: n/a (no nvidia-smi)")
    lines = [
        "== zsnli throughput gate ==",
        f"model: {r['model']}",
        f"device: {r['device']} ({r['device_name']}), dtype {r['dtype']}, launcher {r['launcher']}",
        f"documents: {r['docs']} ({r['documents']}), {r['pairs']} pairs, label counts {r['label_counts']}",
        f"concurrency {r['concurrency']}, warm-ups {r['warmup']}",
        f"throughput: {r['docs_per_s']:.2f} docs/s, {r['pairs_per_s']:.1f} pairs/s (wall {r['wall_s']:.2f} s)",
        f"request seconds: mean {lat['mean_s']:.4f}, p50 {lat['p50_s']:.4f}, p95 {lat['p95_s']:.4f}, max {lat['max_s']:.4f}",
        f"errors: {r['errors'] or 'none'}; 503 retries: {r['retries_503']}",
        mem,
        f"server peak RSS: {r['server_peak_rss_mib']:.0f} MiB",
        (f"compute ceiling: FLOPs/pair = 2 x {p['per_token']:,} encoder params x L + 2 x {p['per_pair']:,} head params; "
         f"mean L {c['mean_tokens_per_pair']:.1f} tokens, {c['flops_per_doc'] / 1e9:.2f} GFLOP/doc; measured "
         f"{m['dtype']} matmul {m['flops_per_s'] / 1e12:.2f} TFLOP/s (n={m['n']}) -> ceiling "
         f"{c['ceiling_docs_per_s']:.1f} docs/s; measured {r['docs_per_s']:.2f} docs/s = "
         f"{100 * r['fraction_of_ceiling']:.1f}% of it"),
        f"anchor: {r['anchor_docs_per_s']:.0f} docs/s (deberta-v3-base server, one H100) -> "
        f"{r['docs_per_s'] / r['anchor_docs_per_s']:.2f}x"
        + ("" if r["device"].startswith("cuda") and not r["model"].startswith("RANDOM WEIGHTS, deberta-tiny")
           else " (not comparable: not a GPU deberta-v3-base run)"),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gate, print the summary, write ``--out``; exit 1 when any request failed."""
    args = parse_args(argv)
    result = run(args)
    print(render(result), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
