"""Corpus classification on Ray Data (``zsnli-batch`` / ``python -m zsnli.batch``).

`zsnli.batch.cli` (flags and every check before Ray starts), `zsnli.batch.job` (the checked run
description), `zsnli.batch.ray_runner` (the Ray Data pipeline; the only importer of Ray) and
`zsnli.batch.predictor` (one actor: the server's own service through `zsnli.serving.offline`).
"""
