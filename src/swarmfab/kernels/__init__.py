"""Kernel design spaces that built-in agents instantiate, one sub-package per workload.

Importing this package does not import torch (the store and the commands that only read
it need the design spaces' types): :mod:`swarmfab.kernels.gemm` and
:mod:`swarmfab.kernels.allocator`, which time torch's GEMMs and page faults, are imported
where they are used."""

from swarmfab.kernels._host import BF16_FLAGS, full_width_isa, host_cpu_flags
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting

__all__ = ["BF16_FLAGS", "DesignSpace", "Knob", "KnobValue", "Setting", "full_width_isa",
           "host_cpu_flags"]
