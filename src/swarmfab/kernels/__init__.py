"""Kernel design spaces that built-in agents instantiate, one sub-package per workload."""

from swarmfab.errors import WorkloadError
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting

__all__ = ["DesignSpace", "Knob", "KnobValue", "Setting", "design_space"]


def design_space(workload: str) -> DesignSpace:
    """The design space a workload declares (built-in or from a user's workload file)."""
    from swarmfab.workloads import get_workload

    space = get_workload(workload).design_space()
    if space is None:
        raise WorkloadError(f"workload {workload!r} declares no design space to search")
    return space
