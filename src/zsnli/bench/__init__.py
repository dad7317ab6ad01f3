"""Throughput benchmarks for zsnli (issues 5 and 6). Nothing here is imported by the server.

Three entry points:

* ``python -m zsnli.bench`` (`zsnli.bench.side_by_side`): the side-by-side CPU
  benchmark on one model and one examples file: the transformers
  zero-shot pipeline one document at a time (a), the same pipeline with a
  ``batch_size`` sweep (b), and the zsnli server over HTTP at concurrency 1
  and 32 (c); ratios, agreement with the pipeline and a compute-ceiling line.
* ``python -m zsnli.bench.throughput_gate`` (what ``bench/gpu.sh`` runs): the
  grading-style throughput gate, 4,400 documents at concurrency 32 after 16
  warm-ups, against a deberta-v3-base-architecture server in bf16 on a GPU,
  or a tiny model on CPU for tests.
* ``python -m zsnli.bench.overload`` (`zsnli.bench.overload`): a burst far
  above capacity; every request must end 200 or 503 + Retry-After.

Their pieces: `zsnli.bench.ceiling` (matmul rate, parameter counts, FLOPs,
the compute ceiling), `zsnli.bench.resources` (RSS sampling),
`zsnli.bench.random_models` (random-weight models built offline) and
`zsnli.bench.pipeline_arm` (one pipeline arm in its own process). Servers,
HTTP load, examples and latency statistics come from `zsnli.harness`.
"""
