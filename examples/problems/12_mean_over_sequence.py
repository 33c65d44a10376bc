"""Mean over the sequence dimension of a (batch, seq, hidden) tensor.

Mean pooling of token embeddings (sentence encoders) and global average pooling of features.
"""
import torch
import torch.nn as nn

batch_size = 48
seq_len = 1024
hidden = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
