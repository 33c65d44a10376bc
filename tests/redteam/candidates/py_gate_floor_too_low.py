"""DROPPED CLAMP (battery: values): the chunked form with gates clamped at -1e30 rather
than at a floor the cumulative sums can carry: an -inf gate (as masking writes) becomes
-1e30, and every difference of cumulative sums after it loses all its digits. Exact for
gates the fast corpus draws; caught by the battery's -inf gates."""

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    g = g.clamp(min=-1e30)  # "no -inf": but -1e30 is no better in a cumulative sum
    floor, delta_math.GATE_FLOOR = delta_math.GATE_FLOOR, -1e30  # and no floor inside
    try:
        o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    finally:
        delta_math.GATE_FLOOR = floor
    return o, state if output_final_state else None
