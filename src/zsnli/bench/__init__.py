"""Throughput benchmarks for zsnli (issues 5 and 6). Nothing here is imported by the server.

Entry points (``python -m zsnli.bench --help`` lists them all, `zsnli.bench.side_by_side_cli.OTHER_COMMANDS`):

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
* ``python -m zsnli.bench.bakeoff_priority``, ``python -m zsnli.bench.read_routes``: ``/classify``
  and read-route latency while bake-offs run; ``python -m zsnli.bench.training_speed``: training
  pairs/s against the compute ceiling.

Their pieces: `zsnli.bench.ceiling` (matmul rate, parameter counts, FLOPs,
the compute ceiling), `zsnli.bench.arm_ceiling` (each server arm's ceiling, from the model(s) it serves),
`zsnli.bench.resources` (RSS sampling),
`zsnli.bench.random_models` (random-weight models built offline, also a command), `zsnli.bench.reports` (the JSON report writer) and
`zsnli.bench.pipeline_arm` (one pipeline arm in its own process, run by the side-by-side bench). Servers,
HTTP load, examples and latency statistics come from `zsnli.harness`.
"""
