"""Workloads: the operators swarmfab optimises, behind one :class:`Workload` contract."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmfab.errors import WorkloadError
from swarmfab.workloads._base import (
    DTYPES,
    AnyShape,
    Case,
    Dims,
    Distribution,
    Forward,
    Inputs,
    KernelRefusedError,
    Outputs,
    Shape,
    Tolerances,
    Workload,
    compulsory_bytes,
)
from swarmfab.workloads.delta.pool import with_pools

if TYPE_CHECKING:
    from swarmfab.kernels import DesignSpace

__all__ = [
    "DTYPES",
    "AnyShape",
    "Case",
    "Dims",
    "Distribution",
    "Forward",
    "Inputs",
    "KernelRefusedError",
    "Outputs",
    "Shape",
    "Tolerances",
    "Workload",
    "compulsory_bytes",
    "design_space",
    "get_workload",
    "with_pools",
    "workload_names",
]


def _registry() -> dict[str, type[Workload]]:
    from swarmfab.workloads.delta.gdn import GDN
    from swarmfab.workloads.delta.kda import KDA

    return {KDA.name: KDA, GDN.name: GDN}


def workload_names() -> list[str]:
    return sorted(_registry())


def get_workload(name: str) -> Workload:
    """The built-in workload called ``name``, or the one a ``.py`` file defines."""
    from swarmfab.workloads._user import is_workload_file, load_workload_file

    if is_workload_file(name):
        return load_workload_file(name)
    try:
        return _registry()[name]()
    except KeyError:
        known = ", ".join(workload_names())
        raise WorkloadError(
            f"unknown workload {name!r}; known workloads: {known} (or a workload .py file)"
        ) from None


def design_space(workload: str, device: str = "cpu") -> DesignSpace:
    """The design space a workload declares for ``device`` (built-in or from a user's
    workload file): its CPU space, or its GPU space for "cuda"."""
    found = get_workload(workload)
    space = found.gpu_design_space() if device == "cuda" else found.design_space()
    if space is None:
        raise WorkloadError(f"workload {workload!r} declares no {device} design space to search")
    return space
