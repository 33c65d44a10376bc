"""Kimi Delta Attention: the gated delta rule with a decay per key channel."""

from __future__ import annotations

from swarmfab.kernels import DesignSpace
from swarmfab.workloads._base import Forward
from swarmfab.workloads.delta.fla import FLA_BASELINES, fla_kda_baselines
from swarmfab.workloads.delta.rule import GatedDeltaRule

__all__ = ["KDA"]


class KDA(GatedDeltaRule):
    """KDA: g is ``[B,T,HV,K]``; compiled candidates export ``kda_forward``."""

    name = "kda"
    description = "Kimi Delta Attention: gated delta rule with per-key-channel decay"
    c_symbol = "kda_forward"
    gate_per_channel = True
    cuda_baselines = frozenset(FLA_BASELINES)
    jit_baselines = frozenset(FLA_BASELINES)  # fla's Triton kernels run ptxas at first call

    def fla_baselines(self) -> dict[str, Forward]:
        return fla_kda_baselines()

    def gpu_design_space(self) -> DesignSpace:
        from swarmfab.kernels.delta_gpu import gpu_space

        return gpu_space(self.name)
