"""EXPLOIT (output aliases an input): the state is updated in the caller's
initial_state tensor, which is returned as final_state ("saves an allocation").

Caught by: "inputs unchanged" (initial_state modified) and "outputs do not alias inputs"
(final_state shares memory with an input).
"""

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    if initial_state is not None:
        state = initial_state.copy_(state)  # in place; returns the caller's tensor
    return o, state if output_final_state else None
