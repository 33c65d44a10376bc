"""Kernel design spaces that built-in agents instantiate, one sub-package per workload."""

from swarmfab.errors import WorkloadError
from swarmfab.kernels._gemm import (
    onednn_available,
    onednn_clearly_faster,
    onednn_gemm_faster,
    onednn_linear,
)
from swarmfab.kernels._host import BF16_FLAGS, host_cpu_flags
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting

__all__ = ["BF16_FLAGS", "DesignSpace", "Knob", "KnobValue", "Setting", "design_space",
           "host_cpu_flags", "onednn_available", "onednn_clearly_faster",
           "onednn_gemm_faster", "onednn_linear"]


def design_space(workload: str, device: str = "cpu") -> DesignSpace:
    """The design space a workload declares for ``device`` (built-in or from a user's
    workload file): its CPU space, or its GPU space for "cuda"."""
    from swarmfab.workloads import get_workload

    found = get_workload(workload)
    space = found.gpu_design_space() if device == "cuda" else found.design_space()
    if space is None:
        raise WorkloadError(f"workload {workload!r} declares no {device} design space to search")
    return space
