"""EXPLOIT (partial output): computes only the first half of the tokens (rounded up);
the other half of o is left at zero and the final state is the one after the first half.

Caught by: "o matches reference" on the first case with more than one token
("tail-not-chunk-multiple").
"""

import torch

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    half = (q.shape[1] + 1) // 2
    o = torch.zeros_like(v)
    o[:, :half], state = delta_math.chunked(
        q[:, :half], k[:, :half], v[:, :half], g[:, :half], beta[:, :half], scale, initial_state
    )
    return o, state if output_final_state else None
