"""GroupNorm over NCHW feature maps: channels split into groups, each normalised
over (channels-in-group, H, W), then a learned per-channel affine.

Used in diffusion U-Nets, detection heads and other small-batch CNNs.
"""
import torch
import torch.nn as nn

batch_size = 16
channels = 128
num_groups = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
