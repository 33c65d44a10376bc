"""3x3 Conv2d followed by inference-mode batch normalisation (stored running stats) and ReLU.

The basic conv-BN-ReLU block of ResNet / VGG-style CNNs as it runs at inference time.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
in_channels = 64
out_channels = 64
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels))
        self.register_buffer("running_mean", 0.1 * torch.randn(out_channels))
        self.register_buffer("running_var", 0.5 + torch.rand(out_channels))

    def forward(self, x):
        x = self.conv(x)
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         training=False, eps=1e-5)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
