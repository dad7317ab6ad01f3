#!/usr/bin/env bash
# The graded setup on an NVIDIA GPU: the first thing to run when a GPU is lent (issues 5 and 58).
#
#   bench/gpu.sh                 # THE GRADED SETUP: serve.sh on model/ as shipped (its calibration.json, sentence
#                                # encoder and cascade; model/base too where the checkout has ZSNLI_MODEL_VARIANT),
#                                # startup time, 16 warm-ups, 4,400 public-mix documents at concurrency 32, every
#                                # answer parsed; prints docs/s, latency, GPU memory, what /health says, the ceiling
#   bench/gpu.sh --dry-run       # what it would serve and send, nothing started (no GPU needed)
#   bench/gpu.sh --random-deberta   # a RANDOM-WEIGHT deberta-v3-base of the published architecture instead (timing only)
#   bench/gpu.sh --tiny          # CPU smoke run: tiny random deberta-v2, 24 docs (env ZSNLI_BENCH_TINY=1)
#   bench/gpu.sh --rows [--dry-run] [--device cuda] [--docs N]   # the CPU bench's rows on the GPU (below)
#
# One command, one timeout: `timeout 540 bench/gpu.sh --out gate.json` (the H100 run of model/ is a server start
# plus about a minute of load; with model/base, two of each). Flags: python -m zsnli.bench.throughput_gate --help.
# PYTHON picks the interpreter (default python3). Runs from the checkout without installing the package (src/ goes
# first on PYTHONPATH).
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
if [[ "${1:-}" != "--rows" ]]; then
    exec "$PY" -m zsnli.bench.throughput_gate "$@"
fi
# --rows [--device cuda] [--examples FILE] [--docs N] [--out FILE] [--dry-run]: the CPU bench's rows (issue 33)
# in one run of `python -m zsnli.bench` on the GPU: (a) the pipeline one document per call, (c) plain NLI scoring,
# (d) the shipped scoring with its cascade in fp32, `exact` the shipped scoring without the cascade (fp32),
# `cascade-bf16` the shipped default as served on a bf16 device (bf16, fixed shapes); docs/s, pairs/s
# (pairs per document = pairs/s / docs/s) at concurrency 32. --dry-run prints the command without running it.
shift
device=cuda examples=../shared/data/zsc/public.jsonl docs="" out="" dry=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --device|--examples|--docs|--out)
            if [[ $# -lt 2 || "$2" == --* ]]; then
                echo "bench/gpu.sh --rows: $1 needs a value" >&2; exit 2
            fi ;;&
        --device) device="$2"; shift 2 ;;
        --examples) examples="$2"; shift 2 ;;
        --docs) docs="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --dry-run) dry=1; shift ;;
        *) echo "bench/gpu.sh --rows: unknown argument $1 (accepted: --device, --examples, --docs, --out, --dry-run)" >&2
           exit 2 ;;
    esac
done
[[ -f "$examples" ]] || { echo "bench/gpu.sh --rows: --examples $examples: not found" >&2; exit 2; }
[[ -f calibration.json ]] || { echo "bench/gpu.sh --rows: no calibration.json in $PWD" >&2; exit 2; }
if [[ -n "$out" ]]; then  # before the run (and with --dry-run): a report that cannot be written loses the run
    "$PY" -c 'import sys; from zsnli.harness.cli import output_file_problem as p; m = p(sys.argv[1]); sys.exit(f"bench/gpu.sh --rows: --out {m}" if m else 0)' "$out" || exit 2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp/exact.json" <<'PYEOF'
import json, sys
doc = json.load(open("calibration.json"))
doc["chosen"]["cascade"] = None
json.dump(doc, open(sys.argv[1], "w"))
PYEOF
cmd=("$PY" -m zsnli.bench --model-dir model --examples "$examples" --device "$device" --batch-sizes none
     --concurrency 32 --calibration "$PWD/calibration.json"
     --variant "exact:ZSNLI_CALIBRATION_PATH=$tmp/exact.json"
     --variant "cascade-bf16:ZSNLI_CALIBRATION_PATH=$PWD/calibration.json,ZSNLI_DTYPE=bfloat16,ZSNLI_FIXED_SHAPES=on")
[[ -n "$docs" ]] && cmd+=(--docs "$docs")
[[ -n "$out" ]] && cmd+=(--out "$out")
if [[ $dry -eq 1 ]]; then
    printf '%q ' "${cmd[@]}"; echo
    exit 0
fi
"${cmd[@]}"
