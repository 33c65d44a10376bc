"""User workloads: an operator described in a Python file, loaded as a :class:`Workload`.

The file defines one subclass of ``swarmfab.workloads.Workload`` (or a module-level
``workload`` instance), or it is a problem file in the KernelBench convention
(``Model``, ``get_inputs``, ``get_init_inputs``: see ``_problem.py``). Everything a
mistake can break is checked when the file loads, and each problem is reported by name,
so the user learns what to fix before any run.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path

from swarmfab.errors import WorkloadError
from swarmfab.workloads._base import Workload
from swarmfab.workloads.problem.workload import ProblemWorkload, is_problem_source

__all__ = ["is_workload_file", "load_workload_file"]


def is_workload_file(name: str) -> bool:
    return name.endswith(".py")


@functools.cache
def load_workload_file(path_text: str) -> Workload:
    """Import ``path_text`` and return the workload it defines (cached per path)."""
    path = Path(path_text)
    if not path.is_file():
        raise WorkloadError(f"workload file {path} does not exist")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"swarmfab_user_workload_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file is broken: say where
        raise WorkloadError(f"workload file {path} failed to import: {exc!r}") from exc
    if is_problem_source(module) and not _declares_workload(module):
        source = path.read_text(encoding="utf-8")
        workload: Workload = ProblemWorkload(path.resolve(), source, vars(module))
    else:
        workload = _find(module, path)
    workload = _validated(workload, path)
    workload.source_file = str(path.resolve())
    return workload


def _declares_workload(module: object) -> bool:
    return isinstance(getattr(module, "workload", None), Workload) or any(
        inspect.isclass(value) and issubclass(value, Workload) and value is not Workload
        and value.__module__ == getattr(module, "__name__", None)
        for value in vars(module).values())


def _find(module: object, path: Path) -> Workload:
    declared = getattr(module, "workload", None)
    if isinstance(declared, Workload):
        return declared
    classes = [
        value for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, Workload) and value.__module__ ==
        getattr(module, "__name__", None) and not inspect.isabstract(value)
    ]
    abstract = [
        value.__name__ for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, Workload) and inspect.isabstract(value)
        and value.__module__ == getattr(module, "__name__", None)
    ]
    if abstract and not classes:
        missing = sorted(getattr(vars(module)[abstract[0]], "__abstractmethods__", ()))
        raise WorkloadError(f"{path}: class {abstract[0]} does not implement "
                            f"{', '.join(missing)}")
    if len(classes) != 1:
        found = "none" if not classes else ", ".join(c.__name__ for c in classes)
        raise WorkloadError(f"{path}: define exactly one subclass of "
                            f"swarmfab.workloads.Workload (found {found})")
    return classes[0]()


def _validated(workload: Workload, path: Path) -> Workload:
    problems = []
    if not getattr(workload, "name", ""):
        problems.append("`name` is empty")
    if not workload.default_shapes:
        problems.append("`default_shapes` is empty (the target shapes to benchmark)")
    if not workload.output_names:
        problems.append("`output_names` is empty")
    try:
        if not workload.validation_cases():
            problems.append("validation_cases() returned no case")
        if not workload.baselines():
            problems.append("baselines() returned no baseline to compare against")
    except Exception as exc:
        problems.append(f"calling it raised {exc!r}")
    if problems:
        raise WorkloadError(f"{path}: " + "; ".join(problems))
    return workload
