"""Kimi Delta Attention: the gated delta rule with a decay per key channel."""

from __future__ import annotations

from swarmfab.workloads._delta import GatedDeltaRule

__all__ = ["KDA"]


class KDA(GatedDeltaRule):
    """KDA: g is ``[B,T,HV,K]``; compiled candidates export ``kda_forward``."""

    name = "kda"
    description = "Kimi Delta Attention: gated delta rule with per-key-channel decay"
    c_symbol = "kda_forward"
    gate_per_channel = True
