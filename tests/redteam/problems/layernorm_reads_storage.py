"""CONTIGUITY ASSUMED (07_layernorm): reads its input's storage as if it were contiguous
from its first element (as a kernel handed data_ptr() does): a view into a wider
buffer, or a column-major input, gives it other numbers. Caught by the fast corpus's
strided case (its second seed), and the battery's strided and column-major inputs."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        flat = torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())
        return self.norm(flat)
