#!/usr/bin/env bash
# Start the zero-shot classification server, offline, one process.
#   ZSNLI_MODEL_DIR  model directory (default ./model)
#   HOST / PORT      bind address (default 0.0.0.0:8000)
#   PYTHON           interpreter (default python3)
# Other ZSNLI_* settings: see the README's configuration table.
# SIGTERM stops accepting, drains in-flight requests (ZSNLI_DRAIN_TIMEOUT_S), exits 0.
set -euo pipefail
cd "$(dirname "$0")"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
export ZSNLI_MODEL_DIR="${ZSNLI_MODEL_DIR:-./model}"
export HOST="${HOST:-0.0.0.0}" PORT="${PORT:-8000}"
exec "${PYTHON:-python3}" server.py "$@"
