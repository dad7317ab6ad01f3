"""Serving: the HTTP app and the service behind it (``python server.py``, ``uvicorn server:app``).

A request walks route -> service -> batcher -> runtime -> scoring: `zsnli.serving.app` (FastAPI
routes, `zsnli.serving.api_types`, `zsnli.serving.http_body`, `zsnli.serving.http_routes`,
`zsnli.serving.docs_assets`), `zsnli.serving.service` (text checks, admission, timeouts),
`zsnli.serving.batching` (the server's token-budget queue), then `zsnli.runtime` and
`zsnli.scoring`. `zsnli.serving.startup` loads and checks the model, `zsnli.serving.drain`,
`zsnli.serving.telemetry` and `zsnli.serving.http_protocol` run the process's life, and
`zsnli.serving.offline` is the same service without HTTP (batch jobs).

Never imports `zsnli.training`, `zsnli.selection` or `zsnli.compare` (tests/test_architecture.py).
"""
