"""Workloads: the operators swarmfab optimises, behind one :class:`Workload` contract."""

from __future__ import annotations

from swarmfab.errors import WorkloadError
from swarmfab.workloads._base import (
    Case,
    Distribution,
    Forward,
    Inputs,
    KernelRefusedError,
    Outputs,
    Shape,
    Tolerances,
    Workload,
)

__all__ = [
    "Case",
    "Distribution",
    "Forward",
    "Inputs",
    "KernelRefusedError",
    "Outputs",
    "Shape",
    "Tolerances",
    "Workload",
    "get_workload",
    "workload_names",
]


def _registry() -> dict[str, type[Workload]]:
    from swarmfab.workloads.gdn import GDN
    from swarmfab.workloads.kda import KDA

    return {KDA.name: KDA, GDN.name: GDN}


def workload_names() -> list[str]:
    return sorted(_registry())


def get_workload(name: str) -> Workload:
    """The built-in workload called ``name``; unknown names list the known ones."""
    try:
        return _registry()[name]()
    except KeyError:
        known = ", ".join(workload_names())
        raise WorkloadError(f"unknown workload {name!r}; known workloads: {known}") from None
