"""Kernel design spaces that built-in agents instantiate, one sub-package per workload."""

from swarmfab.errors import WorkloadError
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting

__all__ = ["DesignSpace", "Knob", "KnobValue", "Setting", "design_space"]


def design_space(workload: str) -> DesignSpace:
    """The built-in design space of a workload."""
    if workload in ("kda", "gdn"):
        from swarmfab.kernels.delta import recurrent_space

        return recurrent_space(workload)
    raise WorkloadError(f"workload {workload!r} has no built-in design space")
