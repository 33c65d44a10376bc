"""BUG (wrong final state layout): returns the final state as [B, HV, V, K] (transposed)
instead of [B, HV, K, V]. With K == V the shape even matches. Every o is right.

Caught by: "final_state matches reference".
"""

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state.transpose(-1, -2).contiguous() if output_final_state else None
