"""Throughput benchmarks for zsnli (issue 5).

Two entry points:

* ``python -m zsnli.bench`` (`zsnli.bench.compare`): the side-by-side CPU
  benchmark on one model and one examples file: the transformers
  zero-shot pipeline one document at a time (a), the same pipeline with a
  ``batch_size`` sweep (b), and the zsnli server over HTTP at concurrency 1
  and 32 (c); ratios, agreement with the pipeline and a compute-ceiling line.
* ``python -m zsnli.bench.gate`` (what ``bench/gpu.sh`` runs): the
  grading-style throughput gate, 4,400 documents at concurrency 32 after 16
  warm-ups, against a deberta-v3-base-architecture server in bf16 on a GPU,
  or a tiny model on CPU for tests.

Shared pieces live in `zsnli.bench.common` (examples, latency summaries,
RSS sampling, matmul rate, FLOP counts), `zsnli.bench.serving` (start the
server, drive it over HTTP) and `zsnli.bench.models` (random-weight models
built offline). Nothing here is imported by the server.
"""
