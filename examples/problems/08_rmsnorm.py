"""RMSNorm written out by hand: x / sqrt(mean(x^2) + eps) * weight over the last dim.

The normalisation of LLaMA, Mistral, Gemma and most recent decoder-only LLMs.
"""
import torch
import torch.nn as nn

batch_size = 16
seq_len = 256
hidden = 1024


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return x * inv_rms * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
