"""One transformers zero-shot-pipeline arm, run in its own process so its peak RSS is its own.

``python -m zsnli.bench.pipeline_arm --model-dir DIR --examples FILE --docs N
--batch-size B --mode doc|stream --warmup W --out result.json``

* ``doc`` mode: one ``pipe(text, candidate_labels=labels,
  hypothesis_template="{}", batch_size=B)`` call per document, timed one by
  one (B = 1 is arm (a), the pipeline's default).
* ``stream`` mode: documents grouped by label set (the pipeline takes one
  ``candidate_labels`` per call), each group passed as a generator with
  ``batch_size=B`` so the pipeline batches pairs across documents (its
  documented way to batch). Per-document seconds are then the intervals
  between successive completed documents (amortised service time), since a
  document's own start is not observable.

The output JSON holds ``wall_s`` (timed part only), ``latencies_s``,
``probabilities`` (per document, in the request's label order: the
pipeline returns labels sorted by score and we put them back), ``pairs``,
``peak_rss_bytes`` (psutil samples during the timed part),
``hwm_bytes`` (VmHWM, whole process life, model load included) and ``load_s``. ``--model-dir``, ``--examples``,
``--device`` and ``--dtype`` are checked before anything loads (one line, exit 2: `zsnli.bench.bench_args`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from itertools import groupby
from typing import Any, Sequence

from ..harness.cli import UsageParser, non_negative_int, output_file, positive_int
from ..harness.examples import Example, load_examples
from .bench_args import check_device, check_examples, check_model_dir, command_description, device_name, dtype_name
from .resources import RssSampler, hwm_bytes


def _probs_in_order(result: dict[str, Any], labels: Sequence[str]) -> list[float]:
    """The pipeline's scores of ``result`` in the order of ``labels`` (the pipeline sorts them by score)."""
    by_label = dict(zip(result["labels"], result["scores"]))
    return [float(by_label[label]) for label in labels]


def build_pipeline(model_dir: str, device: str = "cpu", dtype: str = "float32"):
    """``transformers.pipeline("zero-shot-classification")`` on a local model directory.

    dtype is passed explicitly (the server loads in the same dtype).
    """
    import torch
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the "Loading weights" bar is noise in the bench log
    return pipeline("zero-shot-classification", model=model_dir, tokenizer=model_dir, device=device,
                    dtype=getattr(torch, dtype))


def run_doc_mode(pipe, docs: Sequence[Example], batch_size: int, progress: bool = True):
    """One call per document. Returns ``(wall_s, latencies_s, probabilities)``."""
    from tqdm import tqdm

    latencies: list[float] = []
    probs: list[list[float]] = []
    t_start = time.perf_counter()
    for d in tqdm(docs, desc=f"pipeline bs={batch_size}", unit="doc", disable=not (progress and sys.stderr.isatty()),
                  file=sys.stderr):
        t0 = time.perf_counter()
        out = pipe(d.text, candidate_labels=list(d.labels), hypothesis_template="{}", batch_size=batch_size)
        latencies.append(time.perf_counter() - t0)
        probs.append(_probs_in_order(out, d.labels))
    return time.perf_counter() - t_start, latencies, probs


def run_stream_mode(pipe, docs: Sequence[Example], batch_size: int, progress: bool = True):
    """Documents grouped by label set, each group streamed with ``batch_size``.

    Returns ``(wall_s, latencies_s, probabilities)`` with probabilities in
    the input document order and latencies = inter-completion intervals.
    """
    from tqdm import tqdm

    order = sorted(range(len(docs)), key=lambda i: (tuple(docs[i].labels), i))
    probs: list[list[float] | None] = [None] * len(docs)
    latencies: list[float] = []
    bar = tqdm(total=len(docs), desc=f"pipeline stream bs={batch_size}", unit="doc",
               disable=not (progress and sys.stderr.isatty()), file=sys.stderr)
    t_start = last = time.perf_counter()
    for labels, group in groupby(order, key=lambda i: tuple(docs[i].labels)):
        idx = list(group)
        texts = (docs[i].text for i in idx)
        outputs = pipe(texts, candidate_labels=list(labels), hypothesis_template="{}", batch_size=batch_size)
        for i, out in zip(idx, outputs):
            now = time.perf_counter()
            latencies.append(now - last)
            last = now
            probs[i] = _probs_in_order(out, docs[i].labels)
            bar.update(1)
    bar.close()
    return time.perf_counter() - t_start, latencies, probs


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    ap = UsageParser(prog="python -m zsnli.bench.pipeline_arm", description=command_description(__doc__))
    ap.add_argument("--model-dir", required=True, help="the NLI model directory the pipeline loads (model and tokenizer)")
    ap.add_argument("--examples", required=True, help="examples JSONL (DESIGN.md format) whose documents are scored")
    ap.add_argument("--docs", type=positive_int, default=None, help="first N documents (default: all)")
    ap.add_argument("--batch-size", type=positive_int, default=1,
                    help="the pipeline's batch_size, in pairs (default: %(default)s, the pipeline's own: arm (a))")
    ap.add_argument("--mode", choices=("doc", "stream"), default="doc",
                    help="doc: one pipeline call per document; stream: documents grouped by label set, each group "
                         "streamed so pairs batch across documents (default: %(default)s)")
    ap.add_argument("--warmup", type=non_negative_int, default=2,
                    help="untimed run over the first N documents before the timed one (default: %(default)s)")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch.set_num_threads (default: leave torch's)")
    ap.add_argument("--device", type=device_name, default="cpu", help="the pipeline's device: cpu, cuda, cuda:N (default: %(default)s)")
    ap.add_argument("--dtype", type=dtype_name, default="float32",
                    help="torch dtype the model is loaded in, e.g. float32, bfloat16 (default: %(default)s)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr during the timed run")
    ap.add_argument("--out", type=output_file, required=True,
                    help="where the result JSON goes (timings, probabilities, memory)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry (see module docstring); writes the result JSON to ``--out``."""
    ap = build_parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    check_examples(ap, args.examples)
    check_device(ap, args.device)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    docs = load_examples(args.examples, limit=args.docs).examples
    t0 = time.perf_counter()
    pipe = build_pipeline(args.model_dir, args.device, args.dtype)
    load_s = time.perf_counter() - t0
    run = run_doc_mode if args.mode == "doc" else run_stream_mode
    if args.warmup:
        run(pipe, docs[: args.warmup], args.batch_size, progress=False)
    with RssSampler(os.getpid()) as rss:
        wall, latencies, probs = run(pipe, docs, args.batch_size, progress=not args.no_progress)
    result = {
        "mode": args.mode,
        "batch_size": args.batch_size,
        "docs": len(docs),
        "pairs": sum(len(d.labels) for d in docs),
        "wall_s": wall,
        "latencies_s": latencies,
        "probabilities": probs,
        "peak_rss_bytes": rss.peak_bytes,
        "hwm_bytes": hwm_bytes(os.getpid()),
        "load_s": load_s,
        "torch_threads": torch.get_num_threads(),
        "transformers_version": __import__("transformers").__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
