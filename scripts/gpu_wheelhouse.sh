#!/usr/bin/env bash
# Prepare the wheels scripts/gpu_check.sh installs on a GPU host that has no network.
#
# Run it where pip can reach PyPI, from the repository root; it fills ./.whl (or $1) with
# the packages swarmfab needs that the H200 image lacks (its Python is 3.12; torch 2.11,
# Triton 3.6, numpy, typer, rich, numba, jinja2, matplotlib, pytest, einops are there), plus
# fla-core for the fla baselines. About 8 MB (.whl is git-ignored). Check the pins after
# an upgrade: `unzip -p .whl/pydantic-*.whl '*/METADATA' | grep ^Requires-Dist`.
set -euo pipefail
WHEELHOUSE="${1:-.whl}"
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)
# (fastapi and uvicorn serve only the dashboard, which the check does not start)
PACKAGES=(
    "pydantic>=2.6" pydantic-core annotated-types typing-inspection typing-extensions
    "sqlalchemy>=2.0" greenlet
    alembic mako  # every store runs its schema migrations on open
    fla-core
)
mkdir -p "$WHEELHOUSE"
platform_flags=()
for platform in "${PLATFORMS[@]}"; do platform_flags+=(--platform "$platform"); done
# one version of each, resolved together (pydantic pins its own pydantic-core)
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platform_flags[@]}" --no-deps -d "$WHEELHOUSE" "${PACKAGES[@]}"
ls -1 "$WHEELHOUSE"
