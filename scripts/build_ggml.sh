#!/usr/bin/env bash
# Build ggml's CPU libraries (libggml-base, libggml-cpu) for this host, as llama.cpp
# builds them: Release, -O3, GGML_NATIVE=ON (every vector extension the CPU reports),
# OpenMP, shared libraries, no tests or examples.
#
# The sources are the ggml vendored in llama-cpp-python's sdist on PyPI (its llama.cpp
# submodule at 0c1e57098, ggml 0.25.3). Only ggml is compiled, not libllama.
#
#   scripts/build_ggml.sh [DIR]      default DIR: .swarmfab/peers/ggml
#
# DIR ends up with lib/ (the shared libraries), include/ and BUILD_INFO. A second run
# with the libraries present does nothing. Environment:
#   PYTHON              the Python whose pip downloads the sdist (default: .venv's, else python3)
#   GGML_SDIST          a local llama-cpp-python sdist to use instead of downloading one
#   GGML_OPENMP=OFF     ggml's own thread pool instead of OpenMP
#   JOBS                parallel compile jobs (default 2)
#   FORCE=1             rebuild even when the libraries are there
# The swarmfab binding (swarmfab.workloads.delta.ggml) finds DIR/lib by itself at the default
# place; elsewhere, point SWARMFAB_GGML_LIB at DIR/lib.
set -euo pipefail

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/.swarmfab/peers/ggml}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
JOBS="${JOBS:-2}"
OPENMP="${GGML_OPENMP:-ON}"

if [[ -z "${FORCE:-}" && -e "$DIR/lib/libggml-base.so" && -e "$DIR/lib/libggml-cpu.so" \
      && -e "$DIR/BUILD_INFO" ]]; then
    echo "ggml already built in $DIR (FORCE=1 rebuilds)"
    echo "libraries: $DIR/lib"
    exit 0
fi

missing=()
for tool in cmake gcc g++ tar; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if (( ${#missing[@]} )); then
    echo "error: building ggml needs ${missing[*]} (e.g. apt-get install cmake g++);" \
         "without them, pip install libggml-python gives a prebuilt (AVX2) ggml" >&2
    exit 2
fi

if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

started=$(date +%s)
SDIST="${GGML_SDIST:-$DIR/download/llama_cpp_python-$VERSION.tar.gz}"
if [[ ! -f "$SDIST" ]]; then
    echo "downloading llama-cpp-python==$VERSION (sdist, 77 MB) from PyPI"
    mkdir -p "$DIR/download"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        --dest "$DIR/download" "llama-cpp-python==$VERSION" || true
    if [[ ! -f "$SDIST" ]]; then
        echo "error: could not download llama-cpp-python==$VERSION from PyPI" \
             "(or set GGML_SDIST to a local copy)" >&2
        exit 3
    fi
    if command -v sha256sum >/dev/null 2>&1; then
        echo "$SHA256  $SDIST" | sha256sum --check --quiet - || {
            echo "error: $SDIST does not have the expected sha256 $SHA256" >&2
            exit 3
        }
    fi
fi

SRC="$DIR/src/llama_cpp_python-$VERSION"
if [[ ! -f "$SRC/vendor/llama.cpp/ggml/CMakeLists.txt" ]]; then
    echo "unpacking ggml from $SDIST"
    rm -rf "$DIR/src"
    mkdir -p "$DIR/src"
    tar -xzf "$SDIST" -C "$DIR/src" \
        "llama_cpp_python-$VERSION/vendor/llama.cpp/ggml" \
        "llama_cpp_python-$VERSION/vendor/llama.cpp/LICENSE"
fi

GGML_SRC="$SRC/vendor/llama.cpp/ggml"
# the sdist leaves out the pkg-config template a standalone ggml build configures
if [[ ! -f "$GGML_SRC/ggml.pc.in" ]]; then
    printf 'Name: ggml\nDescription: ggml\nVersion: @GGML_VERSION@\nLibs: -lggml\n' \
        >"$GGML_SRC/ggml.pc.in"
fi

echo "configuring ggml (Release, GGML_NATIVE=ON, OpenMP $OPENMP)"
# the sources are not a git checkout: stop git from reporting the enclosing repository's
# commit as ggml's
export GIT_CEILING_DIRECTORIES="$DIR/src"
cmake -S "$GGML_SRC" -B "$DIR/build" -G "Unix Makefiles" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS_RELEASE="-O3 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" \
    -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_OPENMP="$OPENMP" \
    -DGGML_BACKEND_DL=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
    -DCMAKE_INSTALL_PREFIX="$DIR" -DCMAKE_INSTALL_LIBDIR=lib \
    -DCMAKE_INSTALL_RPATH='$ORIGIN' >"$DIR/configure.log" 2>&1 || {
        tail -n 30 "$DIR/configure.log" >&2
        echo "error: cmake configure failed (full log: $DIR/configure.log)" >&2
        exit 4
    }

echo "compiling with $JOBS jobs (a few minutes on 2 cores)"
cmake --build "$DIR/build" --parallel "$JOBS" >"$DIR/build.log" 2>&1 || {
    tail -n 30 "$DIR/build.log" >&2
    echo "error: ggml build failed (full log: $DIR/build.log)" >&2
    exit 4
}
cmake --install "$DIR/build" >"$DIR/install.log" 2>&1

{
    echo "source=llama-cpp-python $VERSION sdist (llama.cpp 0c1e57098)"
    echo "ggml_version=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' \
        "$GGML_SRC/CMakeLists.txt" | paste -sd.)"
    echo "build_type=Release -O3"
    echo "native=ON"
    echo "openmp=$OPENMP"
    echo "compiler=$(gcc --version | head -n 1)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
} >"$DIR/BUILD_INFO"

echo "built ggml in $(( $(date +%s) - started )) s"
echo "libraries: $DIR/lib"
ls "$DIR/lib" | sed 's/^/  /'
