"""Backends build and load candidates; one class per kind of source."""

from __future__ import annotations

from pathlib import Path

from swarmfab.backends._base import Artifact, Backend
from swarmfab.backends.c import CBackend, host_isa
from swarmfab.backends.python import PythonBackend
from swarmfab.errors import CandidateError

__all__ = ["Artifact", "Backend", "CBackend", "PythonBackend", "backend_for_file", "get_backend",
           "host_isa"]

_BACKENDS: dict[str, type[Backend]] = {"c": CBackend, "python": PythonBackend}
_SUFFIXES = {".c": "c", ".py": "python"}


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
