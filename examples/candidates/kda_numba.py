"""A KDA candidate in Numba: the per-token recurrence, parallel over (batch, value head).

    swarmfab verify kda examples/candidates/kda_numba.py --backend numba
"""

import numba
import numpy as np
import torch


@numba.njit(parallel=True, fastmath=False, cache=False)
def _recurrence(q, k, v, g, beta, h0, scale, o, ht):
    batch, steps, heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    group = value_heads // heads
    for job in numba.prange(batch * value_heads):
        b, hv = job // value_heads, job % value_heads
        h = hv // group
        state = h0[b, hv].copy()
        update = np.empty(value_dim, dtype=np.float32)
        for t in range(steps):
            for i in range(key_dim):
                decay = np.float32(np.exp(g[b, t, hv, i]))
                for j in range(value_dim):
                    state[i, j] *= decay
            for j in range(value_dim):
                predicted = np.float32(0.0)
                for i in range(key_dim):
                    predicted += state[i, j] * k[b, t, h, i]
                update[j] = beta[b, t, hv] * (v[b, t, hv, j] - predicted)
            for i in range(key_dim):
                for j in range(value_dim):
                    state[i, j] += k[b, t, h, i] * update[j]
            for j in range(value_dim):
                total = np.float32(0.0)
                for i in range(key_dim):
                    total += state[i, j] * q[b, t, h, i]
                o[b, t, hv, j] = total * scale
        ht[b, hv] = state


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    batch, _, _, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    scale = key_dim ** -0.5 if scale is None else scale
    arrays = [x.detach().contiguous().float().numpy() for x in (q, k, v, g, beta)]
    if initial_state is None:
        h0 = np.zeros((batch, value_heads, key_dim, value_dim), dtype=np.float32)
    else:
        h0 = initial_state.detach().contiguous().float().numpy()
    o = np.empty(v.shape, dtype=np.float32)
    ht = np.empty((batch, value_heads, key_dim, value_dim), dtype=np.float32)
    _recurrence(*arrays, h0, np.float32(scale), o, ht)
    return torch.from_numpy(o), torch.from_numpy(ht) if output_final_state else None
