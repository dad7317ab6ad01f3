#!/usr/bin/env bash
# The grading-style throughput gate on an NVIDIA GPU (issue 5).
#
#   bench/gpu.sh [--examples ../shared/data/zsc/public.jsonl] [--out gate.json] [other flags]
#   bench/gpu.sh --tiny          # CPU smoke run: tiny random deberta-v2, 24 docs (env ZSNLI_BENCH_TINY=1)
#
# Starts the zsnli server (serve.sh) with a deberta-v3-base-architecture model in bf16:
# ./model when it is one, else RANDOM weights of that architecture built offline (said so),
# sends 16 warm-ups, then 4,400 documents with the public examples' label counts at
# concurrency 32, and prints docs/s, request seconds mean/p95, GPU memory and the
# compute-ceiling line against the GPU's measured bf16 matmul rate.
# Flags: python -m zsnli.bench.throughput_gate --help.  PYTHON picks the interpreter (default python3).
# Runs from the checkout without installing the package (src/ goes first on PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import zsnli.bench.throughput_gate" 2>/dev/null; then
    echo "bench/gpu.sh: cannot import zsnli.bench.throughput_gate with $PY (install the project's dependencies, or set PYTHON)" >&2
    exit 2
fi
exec "$PY" -m zsnli.bench.throughput_gate "$@"
