"""Backends build and load candidates; one class per kind of source."""

from __future__ import annotations

from pathlib import Path

from swarmfab.backends._base import SHARED_BUILDS_ENV, Artifact, Backend
from swarmfab.backends.c import CBackend, host_isa
from swarmfab.backends.gpu import CudaBackend, TritonBackend, cuda_device_available
from swarmfab.backends.python import (
    ModuleBackend,
    NumbaBackend,
    PythonBackend,
    TorchCompileBackend,
)
from swarmfab.errors import CandidateError

__all__ = [
    "SHARED_BUILDS_ENV",
    "Artifact",
    "Backend",
    "CBackend",
    "CudaBackend",
    "ModuleBackend",
    "NumbaBackend",
    "PythonBackend",
    "TorchCompileBackend",
    "TritonBackend",
    "backend_for_file",
    "backend_names",
    "cuda_device_available",
    "get_backend",
    "host_isa",
]

_BACKENDS: dict[str, type[Backend]] = {
    "c": CBackend, "python": PythonBackend, "numba": NumbaBackend,
    "torch-compile": TorchCompileBackend, "torch-module": ModuleBackend,
    "cuda": CudaBackend, "triton": TritonBackend,
}
_SUFFIXES = {".c": "c", ".py": "python", ".cu": "cuda"}


def backend_names() -> list[str]:
    return list(_BACKENDS)


def get_backend(name: str) -> Backend:
    try:
        return _BACKENDS[name]()
    except KeyError:
        raise CandidateError(f"unknown backend {name!r}; known: {', '.join(_BACKENDS)}") from None


def backend_for_file(path: Path) -> str:
    """The backend of a candidate file, from its suffix."""
    try:
        return _SUFFIXES[path.suffix]
    except KeyError:
        known = ", ".join(_SUFFIXES)
        message = f"{path}: unknown candidate format (expected one of {known})"
        raise CandidateError(message) from None
