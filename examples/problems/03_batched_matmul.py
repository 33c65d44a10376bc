"""Batched matrix multiplication C[b] = A[b] @ B[b].

Appears wherever many independent small GEMMs run at once: per-head attention
scores, grouped experts, batched linear algebra.
"""
import torch
import torch.nn as nn

batch_size = 32
m = 256
k = 256
n = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
