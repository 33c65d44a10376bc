"""C = A^T @ B for tall-skinny A (K x M) and B (K x N), contracting the long dimension.

The shape of a weight-gradient GEMM (activations^T @ grad_output) and of
Gram / covariance matrices over many samples.
"""
import torch
import torch.nn as nn

k = 8192
m = 256
n = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.T, b)


def get_inputs():
    return [torch.randn(k, m), torch.randn(k, n)]


def get_init_inputs():
    return []
