"""Kernel design spaces that built-in agents instantiate, one sub-package per workload."""

from swarmfab.kernels._gemm import (
    onednn_available,
    onednn_clearly_faster,
    onednn_gemm_faster,
    onednn_linear,
)
from swarmfab.kernels._host import BF16_FLAGS, host_cpu_flags
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting

__all__ = ["BF16_FLAGS", "DesignSpace", "Knob", "KnobValue", "Setting", "host_cpu_flags",
           "onednn_available", "onednn_clearly_faster", "onednn_gemm_faster", "onednn_linear"]
