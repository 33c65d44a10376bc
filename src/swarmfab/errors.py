"""The one tree of errors swarmfab raises on purpose.

```
SwarmfabError                 anything swarmfab reports to the user as a clear message
├── GoalError                 a goal file or option is invalid (exit code 2 at the CLI)
├── WorkloadError             unknown workload, or a workload definition that is inconsistent
├── CandidateError            a candidate file cannot be read or has the wrong form
├── BuildError                a candidate failed to compile; carries structured diagnostics
├── SandboxError              the sandbox itself could not run a job (not the candidate's fault)
├── MeasurementError          a trusted implementation (baseline, champion) failed to be timed
│   └── DeadlineError         ... by the deadline it was given (a run's budget)
├── StoreError                the knowledge store cannot be opened, read or written
├── ClusterError              the Ray cluster cannot be reached, or lost every evaluator
├── ProviderError             an LLM provider call failed (network, rate limit, timeout,
│                             malformed reply); LLM agents record it and go on
├── EngineError               a model cannot be served (checkpoint, config, engine options)
└── MissingExtraError         an optional feature's package is not installed (also an
                              ImportError); the message names the extra to install
```

A candidate that misbehaves (crashes, hangs, gives wrong answers) is not an error: it is
a recorded verdict. Errors are for things the user or the platform must fix. Third-party
exceptions are translated at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

__all__ = [
    "OUT_OF_SPACE",
    "BuildError",
    "CandidateError",
    "ClusterError",
    "DeadlineError",
    "Diagnostic",
    "EngineError",
    "GoalError",
    "MeasurementError",
    "MissingExtraError",
    "ProviderError",
    "SandboxError",
    "StoreError",
    "SwarmfabError",
    "WorkloadError",
    "import_extra",
]


OUT_OF_SPACE = ("No space left on device", "Disk quota exceeded")
"""How the C library (strerror of ENOSPC, EDQUOT) words a full disk, as tools that fail
for want of space print it in the C locale: the builds and the store tell a full disk
from a candidate's or a query's fault by these words."""


class SwarmfabError(Exception):
    """Base of every error swarmfab raises deliberately."""


class GoalError(SwarmfabError):
    """A goal (file or command-line option) is invalid."""


class WorkloadError(SwarmfabError):
    """A workload is unknown or defined inconsistently."""


class CandidateError(SwarmfabError):
    """A candidate file cannot be loaded (missing entry point, unknown format...)."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One compiler message, structured so an agent can act on it."""

    file: str
    line: int
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"


class BuildError(SwarmfabError):
    """Compilation failed. ``diagnostics`` holds the parsed errors, ``log`` the raw output."""

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] = (), log: str = ""):
        super().__init__(message)
        self.diagnostics = diagnostics
        self.log = log


class SandboxError(SwarmfabError):
    """The sandbox could not run a job for reasons outside the candidate."""


class MeasurementError(SwarmfabError):
    """A side-by-side measurement of trusted implementations could not be completed."""


class DeadlineError(MeasurementError):
    """A measurement was stopped at the deadline it was given (a run's budget)."""


class StoreError(SwarmfabError):
    """The knowledge store cannot be opened, read or written."""


class ClusterError(SwarmfabError):
    """The Ray cluster cannot be reached, or every evaluator on it was lost."""


class ProviderError(SwarmfabError):
    """An LLM provider call failed after its retries; ``kind`` names the failure class."""

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind


class EngineError(SwarmfabError):
    """A checkpoint or engine setting cannot be served (missing file, unknown layer type...)."""


class MissingExtraError(SwarmfabError, ImportError):
    """A package of an optional feature is missing: the core install (``pip install
    swarmfab``) leaves out what only some commands need, and the message names the extra
    that brings it (``pip install 'swarmfab[engine]'``)."""

    def __init__(self, package: str, extra: str, needed_for: str):
        super().__init__(f"{needed_for} needs {package}, which is not installed: "
                         f"pip install 'swarmfab[{extra}]'")
        self.package, self.extra = package, extra


def import_extra(module: str, extra: str, needed_for: str) -> ModuleType:
    """``importlib.import_module(module)``, or a :class:`MissingExtraError` naming
    ``extra`` where it (or a package it needs) is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(module.split(".")[0], extra, needed_for) from exc
