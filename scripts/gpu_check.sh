#!/usr/bin/env bash
# The GPU check for a lent H200 (no network), from the repository root, within 10 minutes
# (each step has its own timeout: 100 s of tests, 200 s of swarm, 160 + 120 s of tables):
#   1. install the wheels the image lacks from the wheelhouse (scripts/gpu_wheelhouse.sh
#      prepares it elsewhere; SWARMFAB_WHEELHOUSE, default .whl),
#   2. the GPU tests (the `gpu` marker) and the rest of the GPU files' tests,
#   3. a short swarm on KDA with device = "cuda",
#   4. its champion verified on the device and timed against fla's chunk_kda and
#      fused_recurrent_kda on fla's benchmark shapes (the table is printed),
#   5. the same in bfloat16, as fla's users call it (q, k, v, beta in bfloat16, the state
#      in float32), at fla's headline shape, a mid-size one and decode with a state.
# Output goes to stdout and, when OUT is set, to $OUT/gpu_check.log.
set -uo pipefail
WHEELHOUSE="${SWARMFAB_WHEELHOUSE:-.whl}"
SITE="${SWARMFAB_SITE:-/tmp/swarmfab-site}"
WORK="${SWARMFAB_GPU_WORK:-/tmp/swarmfab-gpu-check}"
SWARM_BUDGET="${SWARMFAB_SWARM_BUDGET:-100s}"
LOG="${OUT:-$WORK}/gpu_check.log"
PYTHON="${PYTHON:-python3}"
started=$SECONDS
mkdir -p "$WORK" "$(dirname "$LOG")"
exec > >(tee -a "$LOG") 2>&1

step() { printf '\n== %s (%ds elapsed)\n' "$1" $((SECONDS - started)); }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || {
    echo "no NVIDIA GPU visible: this script is for a GPU host"; exit 2; }
if compgen -G "$WHEELHOUSE/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$WHEELHOUSE"/*.whl || { echo "installing the wheels failed"; exit 2; }
    export PYTHONPATH="$SITE:${PYTHONPATH:-}"
else
    echo "no wheels in $WHEELHOUSE: using what is installed (see scripts/gpu_wheelhouse.sh)"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
"$PYTHON" - <<'PY' || exit 2
import torch, triton
print(f"torch {torch.__version__}, triton {triton.__version__}, "
      f"device {torch.cuda.get_device_name()}")
try:
    import fla
    print(f"fla {getattr(fla, '__version__', '?')}")
except ImportError:
    print("fla is not installed: the table compares with the PyTorch baselines only")
import swarmfab  # noqa: F401  (its dependencies import)
PY

step "GPU tests"
# the GPU tests and the rest of the GPU files' tests (the other test files need tools,
# such as Playwright, that this host lacks)
timeout 100 "$PYTHON" -m pytest -q -p no:cacheprovider tests/kernels \
    tests/backends/test_gpu.py tests/measure/test_gpu_timing.py tests/verify/test_gpu_probes.py
tests_status=$?

step "a short swarm on KDA (device = cuda, budget $SWARM_BUDGET)"
cat > "$WORK/goal.toml" <<TOML
workload = "kda"
device = "cuda"
budget = "$SWARM_BUDGET"
threads = 4
eval_timeout = "120s"
shapes = [
  {B = 2, T = 1024, H = 16, K = 128, V = 128},
  {B = 64, T = 1, H = 16, K = 128, V = 128, initial_state = true},
]
TOML
timeout 200 "$PYTHON" -m swarmfab run "$WORK/goal.toml" --db "$WORK/runs.db" \
    --workdir "$WORK/wd"
swarm_status=$?

step "the champion against fla on fla's benchmark shapes (B,T,H,K,V)"
baselines=()
if "$PYTHON" -c "import fla.ops.kda" 2> /dev/null; then
    baselines=(--baseline fla-chunk --baseline fla-fused-recurrent)
fi
timeout 160 "$PYTHON" -m swarmfab bench kda --device cuda --candidate champion \
    --db "$WORK/runs.db" --workdir "$WORK/wd" --threads 4 "${baselines[@]}" \
    --shape 1,8192,96,128,128 --shape 2,16384,16,128,128 --shape 4,2048,16,128,128 \
    --shape 4,4096,64,128,128 --shape 8,2048,32,256,256 --shape 8,1024,8,64,64
bench_status=$?

step "the champion against fla in bfloat16 (B,T,H,K,V; +h0: with a state)"
timeout 120 "$PYTHON" -m swarmfab bench kda --device cuda --candidate champion --dtype bfloat16 \
    --db "$WORK/runs.db" --workdir "$WORK/wd" --threads 4 "${baselines[@]}" \
    --shape 1,8192,96,128,128 --shape 4,2048,16,128,128 --shape 64,1,16,128,128+h0
bf16_status=$?

step "done"
echo "tests: $tests_status, swarm: $swarm_status, bench: $bench_status, bfloat16 bench: $bf16_status"
[ "$tests_status" -eq 0 ] && [ "$swarm_status" -eq 0 ] && [ "$bench_status" -eq 0 ] \
    && [ "$bf16_status" -eq 0 ]
