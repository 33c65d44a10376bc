"""Plain square matrix multiplication C = A @ B.

The dense GEMM at the heart of every linear layer, MLP and attention projection.
"""
import torch
import torch.nn as nn

n = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return []
