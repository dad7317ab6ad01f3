"""Serve zero-shot classification: the FastAPI ``app`` (settings from ZSNLI_* env vars).

``uvicorn server:app`` works; ``python server.py`` (what serve.sh runs) also
sets the exit code: 0 after a drained SIGTERM, 3 when startup is refused
(a bad setting or a failed startup check, before listening), 1 when the
model failed to load (`zsnli.serve.main`).
"""

from zsnli.app import create_app
from zsnli.serve import main

if __name__ == "__main__":
    raise SystemExit(main())

app = create_app()
