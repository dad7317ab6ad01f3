"""Serve zero-shot classification: the FastAPI ``app`` (settings from ZSNLI_* env vars).

``uvicorn server:app`` works; ``python server.py`` (what serve.sh runs) also
sets the exit code: 0 after a drained SIGTERM, non-zero when startup is refused.
"""

from zsnli.app import create_app, serve

app = create_app()

if __name__ == "__main__":
    raise SystemExit(serve(app))
