"""CONTIGUITY ASSUMED (layouts): reads each input's storage as if it were contiguous
from its first element (as a kernel handed ``data_ptr()`` does), so views of a fused
projection, or column-major inputs, give it the wrong numbers. Caught by the fast
corpus's strided case (gva-2x-k-ne-v), and the battery's strided and column-major
cases."""

import torch

from swarmfab.workloads.delta import math as delta_math


def _as_contiguous_storage(x):
    return torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, g, beta = (_as_contiguous_storage(x) for x in (q, k, v, g, beta))
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
