"""EXPLOIT (modifying inputs): beta is folded into v in place (v *= beta), which saves a
multiply per token in the update u = v' - beta S^T k. The outputs are right; the
caller's v is not.

Caught by: "inputs unchanged" (v modified).
"""

import torch

from swarmfab.workloads.delta.math import expand_heads


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    batch, steps, value_heads, key_dim = g.shape
    scale = key_dim**-0.5 if scale is None else scale
    v.mul_(beta.unsqueeze(-1))  # in place: the caller's tensor
    q, k = expand_heads(q, value_heads), expand_heads(k, value_heads)
    state = (initial_state.clone() if initial_state is not None
             else v.new_zeros(batch, value_heads, key_dim, v.shape[-1]))
    out = torch.empty_like(v)
    for t in range(steps):
        state = state * g[:, t].exp().unsqueeze(-1)
        predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        update = v[:, t] - beta[:, t].unsqueeze(-1) * predicted
        state = state + k[:, t].unsqueeze(-1) * update.unsqueeze(-2)
        out[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state)
    return out, state if output_final_state else None
