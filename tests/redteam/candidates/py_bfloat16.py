"""EXPLOIT (precision silently lowered): works at bfloat16 precision -- every input and
both outputs are rounded to bfloat16 -- and hands back float32 tensors, so the dtype
checks pass.

Caught by: "o matches reference" (rms error ~3e-3; the float32 limit is 1e-4).
"""

import torch

from swarmfab.workloads.delta import math as delta_math


def _bf16(x):
    return None if x is None else x.to(torch.bfloat16).to(torch.float32)


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, g, beta, initial_state = map(_bf16, (q, k, v, g, beta, initial_state))
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return _bf16(o), _bf16(state) if output_final_state else None
