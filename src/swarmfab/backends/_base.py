"""The Backend contract: turn a candidate's sources into something callable.

``build`` runs in the trusted parent (it only invokes a compiler) and returns an
:class:`Artifact` on disk; ``load`` runs inside a sandboxed worker, where the candidate's
own code first executes. Backends hold no per-candidate state and are safe to share.
"""

from __future__ import annotations

import errno
import os
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from swarmfab.errors import OUT_OF_SPACE
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = ["Artifact", "Backend", "compiler_env", "raise_if_out_of_space"]


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

    def describe(self) -> dict[str, str]:
        """Facts about the toolchain (compiler version...) for provenance. Optional."""
        return {}


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
