"""A candidate from a file given on the command line (``verify``, ``bench``, ``serve``).

A path that does not exist, cannot be read or has no known format is a usage error
(:class:`GoalError`, exit code 2): nothing was judged. A C or CUDA file is built with
the flags it records, so a champion's own source is the same candidate as the champion
(same flags, same id):

1. a header line among the file's first lines::

       /* swarmfab flags: -O3 -ffast-math -march=native */

   (``// swarmfab flags: ...`` too);
2. else, for a file exported by ``swarmfab export``, the ``flags`` of the
   ``provenance.json`` beside it whose ``entry`` is this file;
3. else the defaults: ``-O3 -march=native`` for C, none for CUDA.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from swarmfab.errors import CandidateError, GoalError

__all__ = ["DEFAULT_C_FLAGS", "FLAGS_HEADER", "candidate_from_file", "flags_of"]

DEFAULT_C_FLAGS = ("-O3", "-march=native")
FLAGS_HEADER = "swarmfab flags:"
_HEADER_LINES = 20  # the header is among the first lines
_HEADER = re.compile(r"^\s*(?://|/\*)\s*" + re.escape(FLAGS_HEADER) + r"(?P<flags>.*?)(?:\*/)?\s*$")
_FLAGGED = ("c", "cuda")  # backends whose candidates carry compiler flags


def candidate_from_file(workload: str, file: Path, backend: str | None = None) -> Any:
    """The candidate in ``file``; GoalError for a path or format that cannot be used."""
    from swarmfab.backends import backend_for_file, backend_names
    from swarmfab.records import Candidate

    if backend is not None and backend not in backend_names():
        raise GoalError(f"--backend {backend!r}: allowed values are {', '.join(backend_names())}")
    if not file.exists():
        raise GoalError(f"candidate file {file} does not exist")
    if file.is_dir():
        raise GoalError(f"{file} is a directory; give a candidate file (.c, .cu or .py)")
    try:
        kind = backend or backend_for_file(file)
    except CandidateError as exc:  # an unknown suffix: nothing to judge, a usage error
        raise GoalError(f"{exc}, or name the backend with --backend") from None
    if backend is None and kind == "python":  # a problem's answer is a ModelNew file
        from swarmfab.workloads import get_workload

        kind = get_workload(workload).python_backend
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GoalError(f"cannot read candidate {file}: {exc}") from exc
    return Candidate(workload, kind, {file.name: text}, file.name,
                     flags=flags_of(file, text, kind))


def flags_of(file: Path, text: str, backend: str) -> tuple[str, ...]:
    """The compiler flags ``file`` records (header, else an export's provenance), else
    the backend's defaults."""
    if backend not in _FLAGGED:
        return ()
    for line in text.splitlines()[:_HEADER_LINES]:
        match = _HEADER.match(line)
        if match:
            return _checked(shlex.split(match.group("flags")), f"{file}: the flags header")
    exported = _exported_flags(file)
    if exported is not None:
        return exported
    return DEFAULT_C_FLAGS if backend == "c" else ()


def _exported_flags(file: Path) -> tuple[str, ...] | None:
    """The flags an exported package's provenance.json records for ``file``, if any."""
    provenance = file.parent / "provenance.json"
    try:
        data = json.loads(provenance.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or Path(str(data.get("entry", ""))).name != file.name:
        return None
    flags = data.get("flags")
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        return None
    return _checked(flags, str(provenance))


def _checked(flags: list[str], where: str) -> tuple[str, ...]:
    """Compiler options only: a stray word would be compiled as a second source file."""
    stray = [flag for flag in flags if not flag.startswith("-")]
    if stray:
        raise GoalError(f"{where}: {', '.join(map(repr, stray))} is not a compiler option "
                        "(every flag starts with '-')")
    return tuple(flags)
