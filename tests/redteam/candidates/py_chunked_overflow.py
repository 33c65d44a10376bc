"""BUG (overflow under strong decay): a chunked (WY/UT) form, in float32, that factors the
intra-chunk decay exp(G_i - G_j) as exp(G_i) * exp(-G_j) so the scores become two
matmuls. Within a 64-token chunk the cumulative log decay G reaches -500 when the decay
is strong: exp(-G) overflows to inf and inf * 0 gives NaN. Everything else (padding of
the tail, grouped heads, initial state, inter-chunk recurrence) is done right, and it
passes every case whose cumulative decay stays above about -88 per chunk.

Caught by: "o matches reference" on "strong-decay" (non-finite outputs).
"""

import torch
import torch.nn.functional as F

from swarmfab.workloads.delta.math import expand_heads

CHUNK = 64


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    batch, steps, heads, key_dim = g.shape
    value_dim = v.shape[-1]
    scale = key_dim**-0.5 if scale is None else scale
    q, k = expand_heads(q, heads), expand_heads(k, heads)
    chunk = min(CHUNK, steps)
    pad = (-steps) % chunk
    if pad:  # zero tokens (g = 0, beta = 0, k = 0) leave the state unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    chunks = (steps + pad) // chunk

    def split(x):  # [B, T, HV, *] -> [B, HV, N, C, *]
        return x.reshape(batch, chunks, chunk, heads, *x.shape[3:]).permute(
            0, 3, 1, 2, *range(4, x.dim() + 1))

    q, k, v, g = split(q), split(k), split(v), split(g)
    beta = split(beta.unsqueeze(-1)).squeeze(-1)
    cum = g.cumsum(dim=-2)
    grow, shrink = cum.exp(), (-cum).exp()  # exp(-G) overflows once G < -88
    k_in, k_out = k * grow, k * shrink
    lower = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    kk = torch.where(lower.tril(-1), k_in @ k_out.transpose(-1, -2), 0.0)
    qk = torch.where(lower, (q * grow) @ k_out.transpose(-1, -2), 0.0) * scale
    eye = torch.eye(chunk, dtype=v.dtype)
    m = torch.linalg.solve_triangular(eye + kk * beta.unsqueeze(-1), torch.diag_embed(beta),
                                      upper=False)
    w, u = m @ k_in, m @ v
    to_end = grow[..., -1:, :] * shrink  # exp(G_C) * exp(-G_i), factored again
    state = (initial_state.clone() if initial_state is not None
             else v.new_zeros(batch, heads, key_dim, value_dim))
    out = torch.empty_like(v)
    for n in range(chunks):
        corrected = u[:, :, n] - w[:, :, n] @ state
        out[:, :, n] = (q[:, :, n] * scale * grow[:, :, n]) @ state + qk[:, :, n] @ corrected
        state = state * grow[:, :, n, -1].unsqueeze(-1) + (
            (k[:, :, n] * to_end[:, :, n]).transpose(-1, -2) @ corrected)
    out = out.permute(0, 2, 3, 1, 4).reshape(batch, steps + pad, heads, value_dim)
    return out[:, :steps].contiguous(), state if output_final_state else None
