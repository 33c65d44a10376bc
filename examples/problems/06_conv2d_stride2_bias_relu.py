"""Strided 3x3 Conv2d (stride 2, downsampling) without its own bias, plus a learned
per-channel bias and ReLU.

The downsampling stage of CNN backbones and of the patch stems of hybrid vision models.
"""
import torch
import torch.nn as nn

batch_size = 8
in_channels = 32
out_channels = 64
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
