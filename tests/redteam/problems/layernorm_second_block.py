"""SECOND PASS MISSED (07_layernorm): rows in blocks of 3,000, the block count rounded down
once there is more than one block: the file's own 8,192 rows leave the last 2,192
unwritten; the small sizes the fast corpus runs fit in one block. Caught by the
battery's case at the file's sizes."""

import torch
import torch.nn as nn

BLOCK = 3000


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        out = torch.zeros_like(rows)
        blocks = 1 if rows.shape[0] <= BLOCK else rows.shape[0] // BLOCK
        for block in range(blocks):
            part = slice(block * BLOCK, (block + 1) * BLOCK if blocks > 1 else rows.shape[0])
            out[part] = self.norm(rows[part])
        return out.reshape(x.shape)
