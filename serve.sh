#!/usr/bin/env bash
# Start the zero-shot classification server, offline, one process.
#   ZSNLI_MODEL_DIR  model directory (default ./model)
#   ZSNLI_MODEL_ID   a hub model (org/name) served from the hub cache instead, pinned by
#                    ZSNLI_MODEL_REVISION (a commit); downloaded once only with ZSNLI_ALLOW_DOWNLOAD=1
#   HOST / PORT      bind address (default 0.0.0.0:8000)
#   PYTHON           interpreter (default: $VIRTUAL_ENV's python; else python3 when it has fastapi;
#                    else the checkout's .venv; else python3, which names what is missing in one line)
# Other ZSNLI_* settings: see docs/configuration.md.
# SIGTERM stops accepting, drains in-flight requests (ZSNLI_DRAIN_TIMEOUT_S), exits 0.
set -euo pipefail
cd "$(dirname "$0")"
# Offline unless ZSNLI_ALLOW_DOWNLOAD is on (then only huggingface_hub may fetch ZSNLI_MODEL_ID, once).
case "$(printf '%s' "${ZSNLI_ALLOW_DOWNLOAD:-0}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')" in
    1|true|yes|on) export HF_HUB_OFFLINE=0 ;;
    *) export HF_HUB_OFFLINE=1 ;;
esac
export TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
export ZSNLI_MODEL_DIR="${ZSNLI_MODEL_DIR:-./model}"
export HOST="${HOST:-0.0.0.0}" PORT="${PORT:-8000}"
if [ -z "${PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        PYTHON="$VIRTUAL_ENV/bin/python"
    elif ! python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("fastapi") is None)' 2>/dev/null \
            && [ -x .venv/bin/python ]; then
        PYTHON=.venv/bin/python
    else
        PYTHON=python3
    fi
fi
# _ZSNLI_PROG: the command typed, which starts a usage error ("./serve.sh: error: ..."), not server.py
_ZSNLI_PROG="$0" exec "$PYTHON" server.py "$@"
