"""Fusable elementwise chain: x * sigmoid(x) * scale + bias (per-channel), clamped to [-4, 4].

The kind of activation epilogue (SiLU/Swish, rescale, shift, clip) that follows
GEMMs and convolutions in EfficientNet-style and quantisation-friendly models.
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 256
hidden = 512
scale = 1.5


class Model(nn.Module):
    def __init__(self, hidden, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x):
        x = x * torch.sigmoid(x) * self.scale + self.bias
        return torch.clamp(x, min=-4.0, max=4.0)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, scale]
