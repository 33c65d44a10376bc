"""HONEST CONTROL: the vectorised chunked (WY/UT) form from swarmfab's own math, in float32."""

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state, chunk=64)
    return o, state if output_final_state else None
