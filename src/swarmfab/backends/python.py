"""The Python backend: a file that defines the workload's ``forward`` (PyTorch, NumPy...)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from swarmfab.backends._base import Artifact, Backend
from swarmfab.errors import BuildError, CandidateError
from swarmfab.records import Candidate
from swarmfab.workloads import Forward, Workload

__all__ = ["ModuleBackend", "NumbaBackend", "PythonBackend", "TorchCompileBackend"]


class PythonBackend(Backend):
    """Python sources; "building" checks the syntax and stores the file in the cache."""

    name = "python"

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        source = candidate.sources[candidate.entry]
        try:
            compile(source, candidate.entry, "exec")
        except SyntaxError as exc:
            where = f"{candidate.entry}:{exc.lineno}"
            raise BuildError(f"syntax error at {where}: {exc.msg}") from exc
        digest = hashlib.sha256(source.encode()).hexdigest()[:24]
        target = cache_dir.resolve() / "python" / digest / "candidate.py"
        if target.exists():
            return Artifact(self.name, target, cached=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_suffix(".tmp")
        scratch.write_text(source)
        os.replace(scratch, target)
        return Artifact(self.name, target)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        module = _import(artifact.path, f"swarmfab_candidate_{artifact.path.parent.name}")
        forward = getattr(module, "forward", None)
        if not callable(forward):
            raise CandidateError("the candidate file does not define a callable `forward`")
        return forward


class NumbaBackend(PythonBackend):
    """A Python file whose ``forward`` uses Numba; JIT compilation happens in the worker.

    Building checks the syntax and that Numba is importable here, so a host without it
    gets a build failure that says so instead of a crash inside the sandbox.
    """

    name = "numba"

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        if importlib.util.find_spec("numba") is None:
            raise BuildError("numba is not installed: pip install 'swarmfab[numba]' to use "
                             "this backend")
        artifact = super().build(candidate, cache_dir)
        return Artifact(self.name, artifact.path, artifact.cached)


class TorchCompileBackend(PythonBackend):
    """A Python file whose ``forward`` is run through ``torch.compile`` by swarmfab.

    Inductor compiles with a C++ compiler in a subprocess, so these candidates run in
    jobs that may start processes (still confined to their directory, without network).
    """

    name = "torch-compile"
    needs_processes = True

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        artifact = super().build(candidate, cache_dir)
        return Artifact(self.name, artifact.path, artifact.cached)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        import torch
        import torch._inductor.config as inductor

        inductor.compile_threads = 1
        forward = super().load(artifact, workload, fill_outputs=fill_outputs)
        return torch.compile(forward)  # recompiles for new shapes, then goes dynamic


class ModuleBackend(PythonBackend):
    """A problem's answer: a Python file defining ``class ModelNew(nn.Module)``.

    The workload builds the module (its weights given by name) and calls it; loading
    returns the class, once per file in a process, so every call of a job shares one
    instance and one compilation. Candidates may use ``torch.compile`` (which starts
    the compiler), hence jobs that may start processes.
    """

    name = "torch-module"
    needs_processes = True

    def build(self, candidate: Candidate, cache_dir: Path) -> Artifact:
        artifact = super().build(candidate, cache_dir)
        return Artifact(self.name, artifact.path, artifact.cached)

    def load(self, artifact: Artifact, workload: Workload, *, fill_outputs: bool) -> Forward:
        return _module_class(str(artifact.path))


@functools.cache
def _module_class(path: str) -> type:
    import torch

    module = _import(Path(path), f"swarmfab_module_{Path(path).parent.name}")
    found = getattr(module, "ModelNew", None)
    if not (isinstance(found, type) and issubclass(found, torch.nn.Module)):
        raise CandidateError("the candidate file does not define `class ModelNew(nn.Module)`")
    return found


def _import(path: Path, module_name: str) -> ModuleType:
    """Execute a candidate file as a module; its failure is the candidate's."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the candidate's own import-time code failed
        raise CandidateError(f"importing the candidate raised {exc!r}") from exc
    return module
