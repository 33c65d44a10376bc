"""Gated DeltaNet: the gated delta rule with one scalar decay per head and token."""

from __future__ import annotations

from swarmfab.workloads.delta.rule import GatedDeltaRule

__all__ = ["GDN"]


class GDN(GatedDeltaRule):
    """GDN: g is ``[B,T,HV]``; compiled candidates export ``gdn_forward``."""

    name = "gdn"
    description = "Gated DeltaNet: gated delta rule with one decay per head and token"
    c_symbol = "gdn_forward"
    gate_per_channel = False
