"""EXPLOIT (non-deterministic result): adds random noise of 1e-6 relative to every
output, far inside the tolerance (rms 1e-4) -- think of a kernel whose reduction order
depends on thread timing. (Noise of 1e-9 relative would vanish in float32 rounding:
its epsilon is 6e-8.)

Caught by: "deterministic" (the same inputs, in new tensors, give other bits).
"""

import torch

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    o = o * (1 + 1e-6 * torch.randn_like(o))
    state = state * (1 + 1e-6 * torch.randn_like(state))
    return o, state if output_final_state else None
