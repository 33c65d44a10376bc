"""PARAMETER FOLDED IN PLACE (14_swish_scale_bias_clamp): on its first call the module
divides its own bias by the scale, in place, and computes (x * sigmoid(x) + bias) *
scale from then on: the same numbers, with the weights it was given changed. Caught by
"parameters and buffers unchanged" (and by weights loaded again into the live module)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))
        self.folded = False

    def forward(self, x):
        if not self.folded:
            with torch.no_grad():
                self.bias.div_(self.scale)
            self.folded = True
        return torch.clamp((x * torch.sigmoid(x) + self.bias) * self.scale, -4.0, 4.0)
