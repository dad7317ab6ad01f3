"""Serve zero-shot classification: the FastAPI ``app`` (settings from ZSNLI_* env vars).

``uvicorn server:app`` works (``/classify``, ``/health`` and the bake-off service,
`zsnli.serve.bare_app`: a refused setting is one line and exit 3 there too); ``python server.py``
(what serve.sh runs) also sets the exit code: 0 after a drained SIGTERM, 3 when startup is refused
(a bad setting or a failed startup check, before listening), 1 when the
model failed to load (`zsnli.serve.main`). Both serve ``GET /metrics``
(`zsnli.serving.telemetry`). Only ``python server.py`` runs
the connection limits of `zsnli.serving.http_protocol` (``ZSNLI_READ_TIMEOUT_S``
deadline with 408, ``ZSNLI_MAX_CONNECTIONS`` cap, ``ZSNLI_KEEP_ALIVE_S``);
``uvicorn server:app`` run bare gets neither the read deadline nor the cap.

Runs from a checkout without ``pip install``: the checkout's ``src/`` is put
first on ``sys.path``, so only the third-party packages are needed; when one is missing it says so in one
line (which, and the README's install command: `zsnli.import_entry`) and exits 2.
"""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import zsnli  # noqa: E402  (standard library only)

#: What serving imports (the product card's packages): named in one line, exit 2, when any is missing.
SERVE_MODULES = ("fastapi", "uvicorn", "pydantic", "starlette", "torch", "transformers", "tokenizers",
                 "safetensors", "huggingface_hub", "numpy")
bare_app, main = zsnli.import_entry("./serve.sh" if __name__ == "__main__" else "server.py", SERVE_MODULES,
                                    "zsnli.serve", "bare_app", "main", import_command="server.py")

if __name__ == "__main__":  # serve.sh names itself in _ZSNLI_PROG, so a usage error names the command typed
    import os

    raise SystemExit(main(sys.argv[1:], prog=os.environ.pop("_ZSNLI_PROG", None) or "server.py"))

app = bare_app()  # uvicorn server:app: a refused setting is one line and exit 3, as for python server.py
