"""The Backend contract: turn a candidate's sources into something callable.

``build`` runs in the trusted parent (it only invokes a compiler) and returns an
:class:`Artifact` on disk; ``load`` runs inside a sandboxed worker, where the candidate's
own code first executes. Backends hold no per-candidate state and are safe to share.

Compiled backends keep each build in the work directory, under a key of everything that
decides the library (sources, flags, compiler, target). Where ``SWARMFAB_BUILD_CACHE``
names a directory, a build is also kept there under the same key and reused by every
work directory (several runs, a CI job, the test suite). :func:`build_library` does both
for every compiled backend. Only the user should write that directory: a library found
there is loaded as it is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmfab.errors import OUT_OF_SPACE
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = ["SHARED_BUILDS_ENV", "Artifact", "Backend", "build_library", "compiler_env",
           "raise_if_out_of_space"]

SHARED_BUILDS_ENV = "SWARMFAB_BUILD_CACHE"


@dataclass(frozen=True, slots=True)
class Artifact:
    """A built candidate: the file a worker loads, and which backend loads it."""

    backend: str
    path: Path
    cached: bool = False


class Backend(ABC):
    """Build and load candidates of one kind (C, Python, ...)."""

    name: str
    # True when loading or first calling starts a compiler process (torch.compile): jobs
    # running such candidates may start processes; every other isolation stays
    needs_processes: bool = False
    device: str = "cpu"  # where its candidates run

    @abstractmethod
    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        """Build ``candidate`` (or reuse the cache). Raises BuildError with diagnostics."""

    @abstractmethod
    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        """Load a built artifact as the workload's Python entry point.

        ``fill_outputs`` asks compiled kernels' wrappers to pre-fill output buffers with
        NaN (verification); benchmarks pass False so the fill is not timed.
        Raises CandidateError when the artifact lacks the entry point.
        """

    def require_device(self) -> None:
        """Raise CandidateError, saying why, where this host has no device to run this
        backend's candidates on (load does too). The CPU's always run."""
        return None

    def describe(self) -> dict[str, str]:
        """Facts about the toolchain (compiler version...) for provenance. Optional."""
        return {}


def _shared(key_dir: Path) -> Path | None:
    """``key_dir`` (``<work dir>/<backend>/<key>``) in the shared build cache, if one is set."""
    root = os.environ.get(SHARED_BUILDS_ENV)
    return Path(root).resolve() / key_dir.parent.name / key_dir.name if root else None


def _copy_files(source: Path, target: Path, last: str) -> None:
    """Copy every file of ``source`` into ``target``, each atomically, ``last`` (the file
    whose presence marks a whole build) after the others; another process's copies in
    flight (hidden files) are not taken."""
    target.mkdir(parents=True, exist_ok=True)
    names = sorted((p.name for p in source.iterdir() if p.is_file() and p.name[0] != "."),
                   key=lambda n: n == last)
    for name in names:
        partial = target / f".{name}.{uuid.uuid4().hex}"
        try:
            shutil.copyfile(source / name, partial)
            os.replace(partial, target / name)
        finally:
            partial.unlink(missing_ok=True)


def _reuse_shared(target: Path) -> bool:
    """Fill ``target``'s directory from the shared build cache, where that holds the same
    build; False where none is set, it lacks the build, or the build went while it was
    copied (it is then built). Another OSError means the work directory cannot be
    written (the evaluator reports it as the platform's problem)."""
    shared = _shared(target.parent)
    if shared is None or not (shared / target.name).is_file():
        return False
    try:
        _copy_files(shared, target.parent, last=target.name)
    except FileNotFoundError:
        return False
    return True


def _share(target: Path) -> None:
    """Keep a finished build (``target`` and the files beside it) in the shared build
    cache, if one is set. It only saves later builds: one that cannot be kept there (a
    full or read-only disk) is still a build."""
    shared = _shared(target.parent)
    if shared is not None:
        with contextlib.suppress(OSError):
            _copy_files(target.parent, shared, last=target.name)


def build_library(backend: str, candidate: Candidate, target: Path,
                  compile_into: Callable[[Path, Path], None]) -> Artifact:
    """The library ``target`` (``<work dir>/<backend>/<key>/<file>``): the one already
    there, or the shared build cache's copy, or a new build. ``compile_into(scratch,
    output)`` compiles the candidate's sources, written into ``scratch``, to ``output``;
    the library then takes ``target``'s place in one step (a reader never sees half of
    it) and is shared."""
    if target.exists() or _reuse_shared(target):
        return Artifact(backend, target, cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        for rel, text in candidate.sources.items():
            path = Path(scratch) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        output = Path(scratch) / target.name
        compile_into(Path(scratch), output)
        os.replace(output, target)
    _share(target)
    return Artifact(backend, target)


def compiler_env() -> dict[str, str]:
    """A compiler's environment: this process's, with messages in English (a full disk
    then reads the same in every locale)."""
    return {**os.environ, "LC_ALL": "C"}


LOW_SPACE_BYTES = 64 * 2**20


def raise_if_out_of_space(log: str, directory: Path) -> None:
    """A compiler that failed for want of disk space is the platform's problem, not the
    candidate's: raise OSError(ENOSPC) (the evaluator reports it and the run stops)
    instead of a build failure the candidate would be blamed for. Only when the log says
    so *and* the file system is nearly full: a source that prints the words itself (an
    #error) still gets its build failure."""
    if not any(words in log for words in OUT_OF_SPACE):
        return
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return
    if free < LOW_SPACE_BYTES:
        raise OSError(errno.ENOSPC, f"the compiler ran out of disk space ({free // 1024} KiB "
                                    "free)")
