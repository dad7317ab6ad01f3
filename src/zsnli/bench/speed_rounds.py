"""The README's speed check, made to survive a busy machine: the transformers zero-shot pipeline (one document per
call) against the zsnli server's shipped default (concurrency 32), interleaved in rounds.

``python -m zsnli.bench.speed_rounds [--model-dir model] [--examples FILE] [--rounds 8] [--docs-per-round 16]
[--concurrency 32] [--new-docs-each-round] [--out report.json]``

Run one arm after the other and a load spike during one of them lands in one arm only: a ratio of 2.34x once
read 36.8x. Here each round runs both arms on the same documents (by default the same ones every round, so
the rounds differ only by the machine's load; ``--new-docs-each-round`` takes a new slice each time), back to
back, alternating which goes first (pipeline then server, then server then pipeline: a load that
drifts over the run is met by both orders), so a spike touches one round, not one arm. Each round gives its
own ratio (server docs/s over pipeline docs/s); the report is their **median** (robust to a spiked round) and
spread (min, max and interquartile range, `summarize`), with the 1-minute load average read before every
round (``os.getloadavg``) and the CPU's model and flags. A progress line at least every 10 s
(`zsnli.runtime.progress`), also while the pipeline loads and the server starts.

The pipeline runs in this process (``zsnli.bench.pipeline_arm.build_pipeline``, fp32, ``torch`` threads as the
machine gives them); the server is ``serve.sh`` with the calibration it finds beside ``--model-dir`` (the shipped
default), started once. One untimed round per arm comes first (the server then keeps the labels' embeddings, as
it does for labels that recur in real traffic).

Imports `zsnli.bench.pipeline_arm`, `zsnli.bench.ceiling` (the CPU line), `zsnli.harness`, `zsnli.runtime.progress`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..harness.cli import UsageParser, positive_int
from ..harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES, ExamplesError, first_existing, load_examples
from ..runtime.progress import Reporter, emit, waiting

#: An arm: ``run(docs, advance) -> seconds`` for one round's documents (``advance(1)`` per document done).
Arm = Callable[[Sequence[Any], Callable[[int], None]], float]


def round_slices(n_docs: int, rounds: int, per_round: int, same: bool = True) -> list[range]:
    """The documents of each round: the first ``per_round`` documents every round (``same``: every round the
    same work, so the rounds' ratios differ only by the machine's load), or consecutive slices of ``per_round``
    wrapping around when the examples run out. Every round has ``min(per_round, n_docs)`` documents. Raises
    ``ValueError`` on no documents or a non-positive count."""
    if n_docs < 1 or rounds < 1 or per_round < 1:
        raise ValueError("need at least one document, one round and one document per round")
    size = min(per_round, n_docs)
    return [range(0, size) if same else range(r * size, r * size + size) for r in range(rounds)]


def order_of(round_index: int) -> tuple[str, str]:
    """Which arm goes first in a round: ``pipeline`` then ``server`` on even rounds, the other way on odd ones."""
    return ("pipeline", "server") if round_index % 2 == 0 else ("server", "pipeline")


def summarize(ratios: Sequence[float]) -> dict[str, float]:
    """Median and spread of per-round ratios: ``median``, ``min``, ``max``, ``q1``, ``q3`` (quartiles,
    ``statistics.quantiles`` method ``inclusive``), ``iqr_over_median`` and ``rounds``. Raises ``ValueError``
    on no ratios."""
    xs = sorted(float(r) for r in ratios)
    if not xs:
        raise ValueError("no rounds to summarise")
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0], xs[0], xs[0])
    median = statistics.median(xs)
    return {"rounds": len(xs), "median": median, "min": xs[0], "max": xs[-1], "q1": q1, "q3": q3,
            "iqr_over_median": (q3 - q1) / median if median else float("nan")}


def run_rounds(docs: Sequence[Any], arms: dict[str, Arm], rounds: int, per_round: int,
               load: Callable[[], float] = lambda: os.getloadavg()[0], terminal: bool | None = None,
               same: bool = True) -> list[dict[str, Any]]:
    """Run ``rounds`` rounds of both ``arms`` (``pipeline`` and ``server``) in `order_of`'s order on
    `round_slices` (``same``: the same documents every round); returns per round ``{"round", "docs", "order", "load1", "pipeline_s", "server_s", "ratio"}``
    (ratio: pipeline seconds over server seconds, i.e. server docs/s over pipeline docs/s). Progress: one
    `zsnli.runtime.progress.Reporter` over every document of both arms (a line at least every 10 s), and a
    line with each round's figures as it ends (a run cut short still shows its rounds)."""
    slices = round_slices(len(docs), rounds, per_round, same)
    total = sum(len(s) for s in slices) * 2
    reporter = Reporter(total, "speed rounds (pipeline + server documents)", "docs", terminal=terminal)
    out = []
    try:
        for i, sl in enumerate(slices):
            chunk = [docs[j % len(docs)] for j in sl]
            row: dict[str, Any] = {"round": i + 1, "docs": len(chunk), "order": list(order_of(i)), "load1": load()}
            for name in order_of(i):
                row[f"{name}_s"] = arms[name](chunk, reporter.advance)
            row["ratio"] = row["pipeline_s"] / row["server_s"] if row["server_s"] > 0 else float("nan")
            out.append(row)
            emit(f"[speed] round {i + 1}/{len(slices)} ({' then '.join(row['order'])}, load {row['load1']:.2f}): "
                 f"pipeline {len(chunk) / row['pipeline_s']:.2f} docs/s, server {len(chunk) / row['server_s']:.2f} "
                 f"docs/s, ratio {row['ratio']:.2f}x")
    finally:
        reporter.close()
    return out


def pipeline_arm(model_dir: str, threads: int | None) -> Arm:
    """The transformers pipeline, one document per call (labels as given, template ``{}``), in this process."""
    import torch

    from .pipeline_arm import build_pipeline

    if threads:
        torch.set_num_threads(threads)
    with waiting("loading the transformers pipeline"):
        pipe = build_pipeline(model_dir)

    def run(chunk, advance):
        t0 = time.perf_counter()
        for d in chunk:
            pipe(d.text, candidate_labels=list(d.labels), hypothesis_template="{}")
            advance(1)
        return time.perf_counter() - t0

    return run


def server_arm(url: str, concurrency: int) -> Arm:
    """The zsnli server at ``url`` driven at ``concurrency`` (`zsnli.harness.load.run_requests`); a document
    that fails makes the round's arm raise ``RuntimeError`` (a figure over failed requests means nothing)."""
    from ..harness.load import run_requests

    def run(chunk, advance):
        result = run_requests(url, chunk, concurrency=concurrency, warmups=0, progress=False, retry_503=20,
                              on_answer=lambda: advance(1))
        errors = result.error_counts()
        if errors:
            raise RuntimeError(f"the server failed documents: {errors}")
        return result.wall_s

    return run


def report(rows: list[dict[str, Any]], cpu: dict[str, Any], args: Any) -> dict[str, Any]:
    """The JSON report: the rounds, `summarize` of their ratios, the load averages and the machine."""
    loads = [r["load1"] for r in rows]
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu, "cpu_count": os.cpu_count(),
            "model_dir": str(args.model_dir), "examples": str(args.examples), "concurrency": args.concurrency,
            "rounds": rows, "ratio": summarize([r["ratio"] for r in rows]),
            "load1": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)}}


def render(rep: dict[str, Any], cpu_text: str) -> str:
    """The printed summary: one line per round, then the median ratio with its spread, the load and the CPU."""
    lines = [f"{'round':>5} {'order':<17} {'load1':>5} {'pipeline docs/s':>15} {'server docs/s':>13} {'ratio':>6}"]
    for r in rep["rounds"]:
        lines.append(f"{r['round']:>5} {'>'.join(r['order']):<17} {r['load1']:>5.2f} "
                     f"{r['docs'] / r['pipeline_s']:>15.2f} {r['docs'] / r['server_s']:>13.2f} {r['ratio']:>5.2f}x")
    s, ld = rep["ratio"], rep["load1"]
    lines.append(f"shipped default (concurrency {rep['concurrency']}) / pipeline: median {s['median']:.2f}x over "
                 f"{s['rounds']} rounds (min {s['min']:.2f}, max {s['max']:.2f}, IQR {s['q1']:.2f}-{s['q3']:.2f}); "
                 f"load average (1 min) {ld['min']:.2f}-{ld['max']:.2f}, median {ld['median']:.2f}; "
                 f"{rep['cpu_count']} CPUs: {cpu_text}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); prints `render` and writes ``--out``. Exit 2 on a usage error."""
    ap = UsageParser(prog="python -m zsnli.bench.speed_rounds", description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--examples", default=None, help="default: ../shared/data/zsc/public.jsonl if present, "
                    "else dev/zeroshot_dev.jsonl")
    ap.add_argument("--rounds", type=positive_int, default=8)
    ap.add_argument("--docs-per-round", type=positive_int, default=16)
    ap.add_argument("--concurrency", type=positive_int, default=32)
    ap.add_argument("--new-docs-each-round", action="store_true",
                    help="a new slice of the examples each round (default: the same documents every round)")
    ap.add_argument("--threads", type=positive_int, default=None)
    ap.add_argument("--repo-root", default=str(Path(__file__).resolve().parents[3]))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.examples = args.examples or str(first_existing(SHARED_PUBLIC_EXAMPLES, DEV_EXAMPLES))
    if not (Path(args.model_dir) / "config.json").is_file():
        ap.error(f"--model-dir {args.model_dir}: no config.json there (a model directory is needed)")
    try:
        docs = [d for d in load_examples(args.examples).examples if d.text]
    except ExamplesError as exc:
        ap.error(f"--examples: {exc}")
    from ..harness.server import offline_env, start_server
    from .ceiling import cpu_info, cpu_line

    os.environ.update(offline_env(args.threads))
    cpu = cpu_info()
    print(f"[speed] {len(docs)} documents from {args.examples}; {args.rounds} rounds of {args.docs_per_round}; "
          f"CPU {cpu_line(cpu)}", file=sys.stderr, flush=True)
    arms = {"pipeline": pipeline_arm(str(Path(args.model_dir).resolve()), args.threads)}
    with waiting("starting the zsnli server"):
        server = start_server(Path(args.model_dir).resolve(), {"ZSNLI_LOG_LEVEL": "warning", "ZSNLI_DEVICE": "cpu",
                                                               "ZSNLI_DTYPE": "float32"}, "auto", args.repo_root,
                              args.threads)
    try:
        arms["server"] = server_arm(server.url, args.concurrency)
        for name in ("pipeline", "server"):  # one untimed round each (the server then holds the labels' embeddings)
            arms[name](docs[: args.docs_per_round], lambda n: None)
        rows = run_rounds(docs, arms, args.rounds, args.docs_per_round, same=not args.new_docs_each_round)
    finally:
        server.stop()
    rep = report(rows, cpu, args)
    print(render(rep, cpu_line(cpu)))
    if args.out:
        Path(args.out).write_text(json.dumps(rep, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
