"""BUG (scalar instead of per-channel decay): uses one decay per token and head (the mean
of g over the key channels), i.e. GDN's gate, for KDA.

Caught by: "o matches reference" on the first case ("decode-with-state").
"""

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scalar = g.mean(-1, keepdim=True).expand_as(g)
    o, state = delta_math.chunked(q, k, v, scalar, beta, scale, initial_state)
    return o, state if output_final_state else None
