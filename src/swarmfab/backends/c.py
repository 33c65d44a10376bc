"""The C backend: gcc or clang with OpenMP, loaded through ctypes.

Builds are cached by a key over the source, the flags, the compiler's version and the
host's ISA, so re-evaluating a candidate (or resuming a run) never recompiles it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from swarmfab.backends._base import (
    Artifact,
    Backend,
    build_library,
    compiler_env,
    raise_if_out_of_space,
)
from swarmfab.errors import BuildError, CandidateError, Diagnostic
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = ["CBackend", "host_isa"]

_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s*(?P<severity>fatal error|error|warning):\s*"
    r"(?P<message>.*)$",
    re.MULTILINE,
)
BUILD_TIMEOUT_S = 120.0
_BASE_FLAGS = ("-fPIC", "-shared", "-fopenmp", "-std=gnu11")


@functools.cache
def host_isa() -> str:
    """The host's machine and vector ISA flags (part of the build-cache key and provenance)."""
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx", "fma", "sse4", "f16c", "amx")
                flags = sorted(f for f in line.split(":")[1].split() if f.startswith(wanted))
                break
    except OSError:
        pass
    return f"{platform.machine()} {' '.join(flags)}".strip()


@functools.cache
def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"C compiler {compiler!r} cannot be run: {exc}") from exc
    return out.stdout.splitlines()[0] if out.stdout else compiler


def parse_diagnostics(log: str) -> tuple[Diagnostic, ...]:
    """Compiler errors and warnings as structured records (file name without directories)."""
    return tuple(
        Diagnostic(Path(m["file"]).name, int(m["line"]), m["severity"], m["message"].strip())
        for m in _DIAGNOSTIC.finditer(log)
    )


class CBackend(Backend):
    """C sources exporting the workload's ``c_symbol``."""

    name = "c"

    def __init__(self, compiler: str | None = None):
        self.compiler = compiler or os.environ.get("CC") or "gcc"

    def describe(self) -> dict[str, str]:
        return {"compiler": _compiler_version(self.compiler), "isa": host_isa()}

    def cache_key(self, candidate: Candidate) -> str:
        parts = [candidate.id, " ".join(candidate.flags), _compiler_version(self.compiler),
                 host_isa(), " ".join(_BASE_FLAGS)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        def compile_into(scratch: Path, output: Path) -> None:
            self._compile([self.compiler, *candidate.flags, *_BASE_FLAGS, "-o", str(output),
                           str(scratch / candidate.entry), "-lm"], cwd=scratch)

        target = cache_dir.resolve() / "c" / self.cache_key(candidate) / "kernel.so"
        return build_library(self.name, candidate, target, compile_into)

    def _compile(self, command: list[str], cwd: Path) -> None:
        try:
            done = subprocess.run(command, capture_output=True, text=True, cwd=cwd,
                                  timeout=BUILD_TIMEOUT_S, env=compiler_env())
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"compilation took longer than {BUILD_TIMEOUT_S:.0f} s") from exc
        except OSError as exc:
            raise BuildError(f"cannot run the C compiler {self.compiler!r}: {exc}") from exc
        if done.returncode != 0:
            log = (done.stderr or done.stdout)[-20_000:]
            raise_if_out_of_space(log, cwd)
            diagnostics = parse_diagnostics(log)
            errors = [d for d in diagnostics if d.severity != "warning"]
            lines = log.strip().splitlines() or ["(no compiler output)"]
            first = str(errors[0]) if errors else lines[0]
            raise BuildError(f"compilation failed: {first}", diagnostics, log)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        library = _library(artifact)
        optional = {suffix: getattr(library, f"{workload.c_symbol}_{suffix}")
                    for suffix in workload.c_optional_symbols
                    if hasattr(library, f"{workload.c_symbol}_{suffix}")}
        return workload.wrap_c(_entry_point(library, workload), fill_outputs=fill_outputs,
                               **optional)


def _library(artifact: Artifact) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(artifact.path))
    except OSError as exc:
        raise CandidateError(f"cannot load the compiled kernel: {exc}") from exc


def load_symbol(artifact: Artifact, workload: Workload) -> Any:
    """The workload's entry point in a built shared library (C or CUDA)."""
    return _entry_point(_library(artifact), workload)


def _entry_point(library: ctypes.CDLL, workload: Workload) -> Any:
    try:
        return getattr(library, workload.c_symbol)
    except AttributeError:
        raise CandidateError(f"the kernel does not export {workload.c_symbol}") from None

