"""The README's speed check, made to survive a busy machine: the transformers zero-shot pipeline (one document per
call) against the zsnli server's shipped default (concurrency 32), interleaved in rounds; with ``--fast-path``,
the shipped default against the fast path (the same model and calibration with ``ZSNLI_SCORING=embedding``: the
sentence encoder's cosine alone), the same way.

``python -m zsnli.bench.speed_rounds [--model-dir model] [--examples FILE] [--rounds 8] [--docs-per-round 16]
[--concurrency 32] [--new-docs-each-round] [--fast-path] [--out report.json]``

Run one arm after the other and a load spike during one of them lands in one arm only: a ratio of 2.34x once
read 36.8x. Here each round runs both arms on the same documents (by default the same ones every round, so
the rounds differ only by the machine's load; ``--new-docs-each-round`` takes a new slice each time), back to
back, alternating which goes first (pipeline then server, then server then pipeline: a load that
drifts over the run is met by both orders), so a spike touches one round, not one arm. Each round gives its
own ratio (server docs/s over pipeline docs/s; with ``--fast-path``, fast-path docs/s over default docs/s); the
report is their **median** (robust to a spiked round) and spread (min, max and interquartile range, `summarize`),
with the 1-minute load average (``os.getloadavg``) read before and after every round and the CPU's model and
flags printed beside every ratio, each round's and the median's. A progress line at least every 10 s
(`zsnli.runtime.progress`), also while the pipeline loads and the servers start.

The pipeline runs in this process (``zsnli.bench.pipeline_arm.build_pipeline``, fp32, ``torch`` threads as the
machine gives them); the server is ``serve.sh`` with the calibration it finds beside ``--model-dir`` (the shipped
default), started once. One untimed round per arm comes first (the server then keeps the labels' embeddings, as
it does for labels that recur in real traffic). With ``--fast-path`` there is no pipeline: two servers run,
the shipped default and the fast path, both started once and driven at ``--concurrency``; the calibration must
hold the fast path's ``embedding_scoring`` object (else one line, exit 2).

Imports `zsnli.bench.pipeline_arm`, `zsnli.bench.ceiling` (the CPU line, the load), `zsnli.bench.bench_args` (the
model directory and checkout checks), `zsnli.harness`,
`zsnli.runtime.progress`, `zsnli.request_scoring` (the fast path's calibration) and `zsnli.config` (where the
server finds its calibration).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..harness.cli import UsageParser, output_file, positive_int
from ..harness.server import stops_servers
from ..harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES, ExamplesError, first_existing, load_examples
from ..runtime.progress import Reporter, emit, waiting
from .bench_args import check_model_dir, check_repo_root, command_description
from .ceiling import load_average, load_text

#: An arm: ``run(docs, advance) -> seconds`` for one round's documents (``advance(1)`` per document done).
Arm = Callable[[Sequence[Any], Callable[[int], None]], float]

README_PAIR = ("pipeline", "server")
"""The README's check: the transformers pipeline (the baseline) against the shipped default."""
FAST_PAIR = ("server", "fast")
"""``--fast-path``: the shipped default (the baseline) against the fast path."""


def round_slices(n_docs: int, rounds: int, per_round: int, same: bool = True) -> list[range]:
    """The documents of each round: the first ``per_round`` documents every round (``same``: every round the
    same work, so the rounds' ratios differ only by the machine's load), or consecutive slices of ``per_round``
    wrapping around when the examples run out. Every round has ``min(per_round, n_docs)`` documents. Raises
    ``ValueError`` on no documents or a non-positive count."""
    if n_docs < 1 or rounds < 1 or per_round < 1:
        raise ValueError("need at least one document, one round and one document per round")
    size = min(per_round, n_docs)
    return [range(0, size) if same else range(r * size, r * size + size) for r in range(rounds)]


def order_of(round_index: int, pair: tuple[str, str] = README_PAIR) -> tuple[str, str]:
    """Which arm of ``pair`` (baseline, challenger) goes first in a round: the pair's order on even rounds, the
    other way on odd ones."""
    return pair if round_index % 2 == 0 else (pair[1], pair[0])


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
               load: Callable[[], float | None] = load_average, terminal: bool | None = None,
               same: bool = True, pair: tuple[str, str] = README_PAIR, cpu: str = "") -> list[dict[str, Any]]:
    """Run ``rounds`` rounds of the two ``arms`` named in ``pair`` (baseline, challenger: `README_PAIR` or
    `FAST_PAIR`) in `order_of`'s order on `round_slices` (``same``: the same documents every round); returns per
    round ``{"round", "docs", "order", "load1", "load1_end", "<name>_s" per arm, "ratio"}`` (ratio: baseline
    seconds over challenger seconds, i.e. challenger docs/s over baseline docs/s; ``load1`` / ``load1_end``:
    ``load()`` before and after the round). Progress: one `zsnli.runtime.progress.Reporter` over every document
    of both arms (a line at least every 10 s), and a line with each round's figures, its load and ``cpu`` (the
    CPU's flags) as it ends (a run cut short still shows its rounds)."""
    slices = round_slices(len(docs), rounds, per_round, same)
    total = sum(len(s) for s in slices) * 2
    reporter = Reporter(total, f"speed rounds ({pair[0]} + {pair[1]} documents)", "docs", terminal=terminal)
    base, challenger = pair
    out = []
    try:
        for i, sl in enumerate(slices):
            chunk = [docs[j % len(docs)] for j in sl]
            row: dict[str, Any] = {"round": i + 1, "docs": len(chunk), "order": list(order_of(i, pair)), "load1": load()}
            for name in order_of(i, pair):
                row[f"{name}_s"] = arms[name](chunk, reporter.advance)
            row["load1_end"] = load()
            row["ratio"] = row[f"{base}_s"] / row[f"{challenger}_s"] if row[f"{challenger}_s"] > 0 else float("nan")
            out.append(row)
            emit(f"[speed] round {i + 1}/{len(slices)} ({' then '.join(row['order'])}): "
                 f"{base} {len(chunk) / row[f'{base}_s']:.2f} docs/s, {challenger} "
                 f"{len(chunk) / row[f'{challenger}_s']:.2f} docs/s, ratio {row['ratio']:.2f}x "
                 f"[{load_text([row['load1'], row['load1_end']])}{'; CPU: ' + cpu if cpu else ''}]")
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


def report(rows: list[dict[str, Any]], cpu: dict[str, Any], args: Any, pair: tuple[str, str] = README_PAIR
           ) -> dict[str, Any]:
    """The JSON report: the arms compared (``pair``: baseline, challenger), the rounds, `summarize` of their
    ratios, the load averages (every reading, before and after each round) and the machine."""
    loads = [x for r in rows for x in (r["load1"], r.get("load1_end")) if x is not None]
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu, "cpu_count": os.cpu_count(),
            "model_dir": str(args.model_dir), "examples": str(args.examples), "concurrency": args.concurrency,
            "pair": list(pair), "rounds": rows, "ratio": summarize([r["ratio"] for r in rows]),
            "load1": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)} if loads else None}


ARM_TITLES = {"pipeline": "pipeline", "server": "shipped default", "fast": "fast path"}


def render(rep: dict[str, Any], cpu_text: str) -> str:
    """The printed summary: one line per round with its load, then the median ratio with its spread, the load
    and the CPU (`zsnli.bench.ceiling.cpu_tag`'s flags)."""
    base, challenger = rep.get("pair") or README_PAIR
    lines = [f"{'round':>5} {'order':<17} {'load1':>11} {base + ' docs/s':>15} {challenger + ' docs/s':>15} "
             f"{'ratio':>6}"]
    for r in rep["rounds"]:
        lines.append(f"{r['round']:>5} {'>'.join(r['order']):<17} "
                     f"{load_text([r['load1'], r.get('load1_end')]).removeprefix('load '):>11} "
                     f"{r['docs'] / r[f'{base}_s']:>15.2f} {r['docs'] / r[f'{challenger}_s']:>15.2f} "
                     f"{r['ratio']:>5.2f}x [CPU: {cpu_text}]")
    s, ld = rep["ratio"], rep["load1"]
    load = (f"load average (1 min) {ld['min']:.2f}-{ld['max']:.2f}, median {ld['median']:.2f}" if ld
            else "load unknown")
    lines.append(f"{ARM_TITLES[challenger]} (concurrency {rep['concurrency']}) / {ARM_TITLES[base]}: median "
                 f"{s['median']:.2f}x over {s['rounds']} rounds (min {s['min']:.2f}, max {s['max']:.2f}, IQR "
                 f"{s['q1']:.2f}-{s['q3']:.2f}) [{load}; {rep['cpu_count']} CPUs: {cpu_text}]")
    return "\n".join(lines)


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option; `parse_args` checks the rest."""
    ap = UsageParser(prog="python -m zsnli.bench.speed_rounds", description=command_description(__doc__))
    ap.add_argument("--model-dir", default="model",
                    help="the model of the pipeline and of the servers, with the calibration the server finds beside "
                         "it (default: %(default)s)")
    ap.add_argument("--examples", default=None, help="default: ../shared/data/zsc/public.jsonl if present, "
                    "else dev/zeroshot_dev.jsonl")
    ap.add_argument("--rounds", type=positive_int, default=8,
                    help="timed rounds, each running both arms on the same documents (default: %(default)s)")
    ap.add_argument("--docs-per-round", type=positive_int, default=16,
                    help="documents of each round, and of the untimed round each arm runs first (default: %(default)s)")
    ap.add_argument("--concurrency", type=positive_int, default=32,
                    help="requests in flight at once to each server (the pipeline takes one document per call; "
                         "default: %(default)s)")
    ap.add_argument("--new-docs-each-round", action="store_true",
                    help="a new slice of the examples each round (default: the same documents every round)")
    ap.add_argument("--fast-path", action="store_true",
                    help="the shipped default against the fast path (ZSNLI_SCORING=embedding) instead of the pipeline "
                         "against the shipped default; needs calibration.json's embedding_scoring")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch threads of the pipeline and of each server (OMP/MKL and ZSNLI_TORCH_THREADS); "
                         "default: as the machine gives them")
    ap.add_argument("--repo-root", default=str(Path(__file__).resolve().parents[3]),
                    help="the checkout whose serve.sh starts the servers (default: this one, %(default)s)")
    ap.add_argument("--out", type=output_file, default=None,
                    help="also write the report (every round, the median ratio and its spread) here as JSON")
    return ap


def parse_args(argv: Sequence[str] | None) -> Any:
    """The flags (module docstring), checked: one line and exit 2 for a ``--model-dir`` that is no model directory,
    a ``--repo-root`` that is no checkout (`zsnli.bench.bench_args`), a missing examples file, a bad
    count, or ``--fast-path`` without the calibration's ``embedding_scoring``. Sets ``args.docs`` (the examples
    with text) and ``args.pair``."""
    ap = build_parser()
    args = ap.parse_args(argv)
    args.examples = args.examples or str(first_existing(SHARED_PUBLIC_EXAMPLES, DEV_EXAMPLES))
    check_model_dir(ap, args.model_dir)
    check_repo_root(ap, args.repo_root)
    if args.fast_path:
        from ..config import Settings
        from ..request_scoring import load_embedding_scoring

        from ..scoring import ScoringConfigError

        calibration = Settings(model_dir=args.model_dir).resolved_calibration_path()
        try:
            fast = load_embedding_scoring(calibration)
        except ScoringConfigError as exc:
            ap.error(f"--fast-path: {exc}")
        if fast is None:
            ap.error(f"--fast-path: {calibration} (where the server finds its calibration) has no embedding_scoring "
                     "object (train.py select --kinds writes one)")
    try:
        args.docs = [d for d in load_examples(args.examples).examples if d.text]
    except ExamplesError as exc:
        ap.error(f"--examples: {exc}")
    args.pair = FAST_PAIR if args.fast_path else README_PAIR
    return args


SERVER_ENV = {"ZSNLI_LOG_LEVEL": "warning", "ZSNLI_DEVICE": "cpu", "ZSNLI_DTYPE": "float32"}
"""The servers' settings: fp32 on the CPU, the calibration beside the model (the shipped default)."""


@stops_servers("python -m zsnli.bench.speed_rounds")
def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); prints `render` and writes ``--out``. Exit 2 on a usage error."""
    args = parse_args(argv)
    from contextlib import ExitStack

    from ..harness.server import offline_env, start_server
    from .ceiling import cpu_info, cpu_line, cpu_tag

    os.environ.update(offline_env(args.threads))
    cpu, docs, model_dir = cpu_info(), args.docs, Path(args.model_dir).resolve()
    print(f"[speed] {len(docs)} documents from {args.examples}; {args.rounds} rounds of {args.docs_per_round}, "
          f"{' against '.join(args.pair)}; CPU {cpu_line(cpu)}", file=sys.stderr, flush=True)
    arms: dict[str, Arm] = {}
    if "pipeline" in args.pair:
        arms["pipeline"] = pipeline_arm(str(model_dir), args.threads)
    with ExitStack() as stack:
        for name in (n for n in args.pair if n != "pipeline"):
            env = {**SERVER_ENV, **({"ZSNLI_SCORING": "embedding"} if name == "fast" else {})}
            with waiting(f"starting the zsnli server ({ARM_TITLES[name]})"):
                server = start_server(model_dir, env, "auto", args.repo_root, args.threads)
            stack.callback(server.stop)
            arms[name] = server_arm(server.url, args.concurrency)
        for name in args.pair:  # one untimed round each (a server then holds the labels' embeddings)
            arms[name](docs[: args.docs_per_round], lambda n: None)
        rows = run_rounds(docs, arms, args.rounds, args.docs_per_round, same=not args.new_docs_each_round,
                          pair=args.pair, cpu=cpu_tag(cpu))
    rep = report(rows, cpu, args, args.pair)
    print(render(rep, cpu_line(cpu)))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rep, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
