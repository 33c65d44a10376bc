"""BUG (dropped chunk tail): processes whole chunks of 16 tokens only; the last T % 16
tokens are ignored (their o stays zero and the state misses them). A sequence shorter
than a chunk is one chunk, so single-token decode is right.

Caught by: "o matches reference" on "tail-not-chunk-multiple" (T = 37).
"""

import torch

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    steps = q.shape[1]
    chunk = min(16, steps)
    full = steps // chunk * chunk  # the tail beyond `full` is dropped
    o = torch.zeros_like(v)
    o[:, :full], state = delta_math.chunked(
        q[:, :full], k[:, :full], v[:, :full], g[:, :full], beta[:, :full], scale,
        initial_state, chunk=chunk,
    )
    return o, state if output_final_state else None
