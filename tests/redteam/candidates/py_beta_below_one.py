"""SPECIAL VALUES (battery: values): a beta of exactly 0 or exactly 1 taken for a bad
input and replaced by 0.001 or 0.999 "for stability". The fast corpus's betas near 0
and 1 never hit either value exactly; the battery's do."""

import torch

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    beta = torch.where(beta <= 0, 0.001, torch.where(beta >= 1, 0.999, beta))
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
