"""``python -m zsnli.bench.cost_profile``: where a document's time goes, per scoring, at concurrency N (issue 50).

The service runs in this process (`zsnli.serving.offline.OfflineClassifier`, fp32 on the CPU, the model's
calibration.json), and for each scoring of ``--scoring`` (default ``pipeline`` = plain NLI, ``served`` = the
shipped default, ``embedding`` = the fast path) the same documents go through
`zsnli.serving.service.ZeroShotClassifier.classify_many` at ``--concurrency`` (default 32). Timed, per document
(stage seconds summed over the run, divided by the documents):

* ``tokenise``: the tokeniser thread (`zsnli.serving.document.tokenize` and `embedding_tokens`);
* ``NLI forward``, ``embedding forward (texts)``, ``embedding forward (labels)``: the batcher's forwards of each
  kind (`zsnli.serving.batch_types.BatchRecord.seconds`, from a batch observer);
* ``padding waste``: the share of each kind's forward spent on padding, 1 - real tokens / padded tokens
  (real: the tokens of the items tokenised, so rows shared between identical items make it a lower bound);
* ``postprocess``: `ZeroShotClassifier.postprocess` (the scoring arithmetic);
* ``queue``: mean latency minus the document's own stages (what it waits behind other documents).

Then the bound of the shipped default over plain NLI scoring: plain NLI's measured seconds per document over
the default's forwards without padding (the least the default must compute at equal quality). Each line names
the CPU (`zsnli.bench.ceiling.cpu_tag`) and the load average. Timing only: no figure here is a test.

Imports `zsnli.config`, `zsnli.harness` (examples, the parser), `zsnli.bench.ceiling` (CPU flags),
`zsnli.bench.bench_args` (the description, the model directory check) and, in `profile`,
`zsnli.serving.offline` and `zsnli.serving.service` (the service in this process, instrumented).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..harness.cli import UsageParser, path_type, positive_int, usage_error
from .bench_args import check_model_dir, command_description
from ..harness.examples import SHARED_PUBLIC_EXAMPLES, ExamplesError, load_examples
from .ceiling import cpu_info, cpu_tag

PROG = "python -m zsnli.bench.cost_profile"
STAGES = ("tokenise", "queue", "NLI forward", "embedding forward (texts)", "embedding forward (labels)",
          "padding waste", "postprocess")
KINDS = {"nli": "NLI forward", "embedding_text": "embedding forward (texts)",
         "embedding_label": "embedding forward (labels)"}


@contextmanager
def _instrumented(service) -> Iterator[dict[str, float]]:
    """Stage totals (seconds, tokens) of ``service`` while the block runs: the tokeniser steps and postprocess
    wrapped with timers, a batch observer adding each forward's seconds and padded tokens by kind."""
    from ..serving import service as svc_module

    totals: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        totals[key] = totals.get(key, 0.0) + value

    def timed(fn, key):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            add(key, time.perf_counter() - t0)
            if key == "tokenise":
                for kind, items in out.work():
                    add(f"real:{kind}", sum(len(e) for e in items))
            return out
        return wrapper

    def observe(record) -> None:
        add(f"forward:{record.kind}", record.seconds)
        add(f"padded:{record.kind}", record.padded_tokens)

    saved = (svc_module.tokenize, svc_module.embedding_tokens, service.postprocess)
    svc_module.tokenize, svc_module.embedding_tokens = timed(saved[0], "tokenise"), timed(saved[1], "tokenise")
    service.postprocess = timed(saved[2], "postprocess")
    service.batch_observers.append(observe)
    try:
        yield totals
    finally:
        svc_module.tokenize, svc_module.embedding_tokens = saved[0], saved[1]
        del service.postprocess
        service.batch_observers.remove(observe)


def stage_table(totals: dict[str, float], docs: int, wall_s: float, latencies_s: Sequence[float]) -> dict[str, Any]:
    """Per-document seconds of each of `STAGES` from the run's ``totals`` (`_instrumented`), with
    ``wall_s`` (the run), ``docs_per_s`` and ``mean_latency_s``. Forward stages exclude their padding share."""
    per = {s: 0.0 for s in STAGES}
    per["tokenise"] = totals.get("tokenise", 0.0) / docs
    per["postprocess"] = totals.get("postprocess", 0.0) / docs
    for kind, stage in KINDS.items():
        fwd = totals.get(f"forward:{kind}", 0.0) / docs
        padded = totals.get(f"padded:{kind}", 0.0)
        waste = max(0.0, 1.0 - totals.get(f"real:{kind}", 0.0) / padded) if padded else 0.0
        per[stage] = fwd * (1 - waste)
        per["padding waste"] += fwd * waste
    latency = sum(latencies_s) / len(latencies_s)
    per["queue"] = max(0.0, latency - sum(v for k, v in per.items() if k != "queue"))
    return {"per_doc_s": per, "wall_s": wall_s, "docs_per_s": docs / wall_s, "mean_latency_s": latency}


def profile(settings, docs: list[dict], scorings: Sequence[str], concurrency: int,
            loader=None) -> dict[str, dict[str, Any]]:
    """`stage_table` of each scoring on ``docs`` (``/classify`` bodies: ``text``, ``labels``) in one service in
    this process (`zsnli.config.Settings` ``settings``; ``loader``: the service's model loader, default the
    server's), each after an untimed pass over ``concurrency`` documents. A document's ``ApiError`` is raised."""
    from ..serving.offline import OfflineClassifier

    out: dict[str, dict[str, Any]] = {}
    with OfflineClassifier(settings, loader) as clf:
        service = clf.service
        for scoring in scorings:
            body = [{**d, "scoring": scoring} for d in docs]
            clf.classify_many(body[:concurrency], concurrency)
            latencies: list[float] = []

            async def one(doc, gate):
                async with gate:
                    t0 = time.perf_counter()
                    await service.classify(doc["text"], doc["labels"], scoring=scoring)
                    latencies.append(time.perf_counter() - t0)

            async def run_all():
                import asyncio

                gate = asyncio.Semaphore(concurrency)
                await asyncio.gather(*(one(d, gate) for d in body))

            with _instrumented(service) as totals:
                t0 = time.perf_counter()
                clf._call(run_all())
                wall = time.perf_counter() - t0
            out[scoring] = stage_table(totals, len(body), wall, latencies)
    return out


def render(result: dict[str, dict[str, Any]], cpu: str) -> list[str]:
    """The printed lines: a markdown table (ms per document of each stage, per scoring), docs/s, the bound."""
    names = list(result)
    lines = ["| stage (ms per document) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(f"{1000 * result[n]['per_doc_s'][stage]:.1f}" for n in names) + " |")
    lines.append("| mean latency | " + " | ".join(f"{1000 * result[n]['mean_latency_s']:.0f}" for n in names) + " |")
    lines.append("| docs/s | " + " | ".join(f"{result[n]['docs_per_s']:.2f}" for n in names) + " |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines.append(f"[CPU: {cpu}; load average {load:.2f}]")
    if "served" in result and "pipeline" in result:
        d = result["served"]["per_doc_s"]
        least = sum(d[k] for k in ("NLI forward", "embedding forward (texts)", "embedding forward (labels)"))
        plain = 1.0 / result["pipeline"]["docs_per_s"]
        lines.append(f"bound: shipped default / plain NLI <= {plain / least:.2f}x (plain NLI {1000 * plain:.1f} ms per "
                     f"document over the default's forwards without padding, {1000 * least:.1f} ms); measured "
                     f"{result['served']['docs_per_s'] / result['pipeline']['docs_per_s']:.2f}x [CPU: {cpu}]")
    if "embedding" in result and "served" in result:
        lines.append(f"fast path / shipped default: {result['embedding']['docs_per_s'] / result['served']['docs_per_s']:.2f}x"
                     f" [CPU: {cpu}]")
    return lines


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    p = UsageParser(prog=PROG, description=command_description(__doc__))
    p.add_argument("--model-dir", default="model",
                   help="the NLI model served, with its calibration.json as the server finds it (default: %(default)s)")
    p.add_argument("--examples", type=path_type, default=SHARED_PUBLIC_EXAMPLES,
                   help="examples-format JSONL, for reporting only (default: the shared public examples, %(default)s)")
    p.add_argument("--docs", type=positive_int, default=100,
                   help="documents, taken evenly from each dataset (default: %(default)s)")
    p.add_argument("--concurrency", type=positive_int, default=32,
                   help="documents in flight at once; the untimed first pass of each scoring sends this many "
                        "(default: %(default)s)")
    p.add_argument("--scoring", action="append", choices=("pipeline", "served", "embedding"), default=None,
                   help="scorings to profile (repeatable; default pipeline, served, embedding)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, profile, print; exit 2 with one line on a usage mistake (a ``--model-dir`` that is no NLI model
    directory: `zsnli.bench.bench_args.check_model_dir`)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    try:
        docs = sampled_documents(args.examples, args.docs)
    except ValueError as exc:
        return usage_error(PROG, str(exc))
    from ..config import Settings

    settings = Settings(model_dir=args.model_dir, device="cpu", dtype="float32", torch_threads=args.threads,
                        log_level="warning")
    result = profile(settings, [{"text": d["text"], "labels": d["labels"]} for d in docs],
                     args.scoring or ["pipeline", "served", "embedding"], args.concurrency)
    print(f"{len(docs)} documents ({args.examples}), concurrency {args.concurrency}, fp32")
    print("\n".join(render(result, cpu_tag(cpu_info()))))
    return 0


def sampled_documents(examples: Path, n: int) -> list[dict]:
    """The documents a profile runs: `even_sample` of the examples file's non-empty texts, ``{"text", "labels",
    "dataset"}`` each. Raises ``ValueError`` (one line, for the usage error) when the examples cannot be read."""
    try:
        loaded = load_examples(str(examples)).examples
    except ExamplesError as exc:
        raise ValueError(str(exc)) from None
    return even_sample([{"text": e.text, "labels": list(e.labels), "dataset": e.dataset} for e in loaded if e.text], n)


def even_sample(docs: list[dict], n: int) -> list[dict]:
    """The first ``ceil(n / datasets)`` documents of each dataset (by ``dataset``), in file order, at most ``n``."""
    by: dict[str, list[dict]] = {}
    for d in docs:
        by.setdefault(d.get("dataset") or "", []).append(d)
    per = -(-n // max(1, len(by)))
    return [d for group in by.values() for d in group[:per]][:n]


if __name__ == "__main__":
    raise SystemExit(main())
