#!/usr/bin/env bash
# The GPU check for a lent H200 (no network), from the repository root: installs the wheels
# the image lacks from the wheelhouse (scripts/gpu_wheelhouse.sh prepares it elsewhere;
# SWARMFAB_WHEELHOUSE, default .whl), then runs scripts/gpu_check.py with the arguments
# given (--smoke: about a minute). Its phases, limits, watchdog and JSON summary are
# described there; logs and the summary go to $OUT (default ./gpu-check).
set -uo pipefail
WHEELHOUSE="${SWARMFAB_WHEELHOUSE:-.whl}"
SITE="${SWARMFAB_SITE:-/tmp/swarmfab-site}"
PYTHON="${PYTHON:-python3}"
started=$SECONDS
printf '== wheels (0 s elapsed)\n'
if compgen -G "$WHEELHOUSE/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$WHEELHOUSE"/*.whl || { echo "installing the wheels failed"; exit 2; }
    export PYTHONPATH="$SITE:${PYTHONPATH:-}"
else
    echo "no wheels in $WHEELHOUSE: using what is installed (see scripts/gpu_wheelhouse.sh)"
fi
printf -- '-- wheels: %d s\n' $((SECONDS - started))
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
exec "$PYTHON" scripts/gpu_check.py "$@"
