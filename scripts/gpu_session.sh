#!/usr/bin/env bash
# A whole GPU session's measurements, from the repository root on a GPU host (see
# scripts/gpu_check.sh): the GPU check within CHECK_TOTAL seconds, then the kernel table
# of scripts/gpu_kernels.py in float32 and bfloat16 (each within KERNELS_LIMIT seconds,
# its stacks printed if it hangs); every log and table in one archive under $OUT
# (session.tgz), the check's summary beside it.
set -uo pipefail
OUT="${OUT:-gpu-session}"
CHECK_TOTAL="${CHECK_TOTAL:-300}"
KERNELS_LIMIT="${KERNELS_LIMIT:-100}"
LOGS=/tmp/swarmfab-gpu-session
mkdir -p "$OUT" "$LOGS"
started=$SECONDS
bash scripts/gpu_check.sh --out "$LOGS" --total "$CHECK_TOTAL" "$@"
echo "gpu_check exit $? after $((SECONDS - started)) s"
export PYTHONPATH="/tmp/swarmfab-site:$PWD/src:${PYTHONPATH:-}" PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/swarmfab-gpu-check/wd/cache/triton-trusted TRITON_CACHE_AUTOTUNING=1
for dtype in float32 bfloat16; do
    printf '\n== kernels %s (%d s elapsed, limit %d s)\n' "$dtype" $((SECONDS - started)) "$KERNELS_LIMIT"
    timeout -s ABRT -k 5 "$KERNELS_LIMIT" python3 scripts/gpu_kernels.py --dtype "$dtype" --profile \
        --json "$LOGS/kernels_$dtype.json" 2>&1 | tee "$LOGS/kernels_$dtype.log"
done
tar czf "$OUT/session.tgz" -C "$LOGS" . && cp "$LOGS/gpu_check.json" "$OUT/" 2>/dev/null
echo "done in $((SECONDS - started)) s"
