"""Causal scaled dot-product attention written by hand:
softmax(Q K^T / sqrt(d) with future positions masked) @ V, per batch and head.

The core of every decoder-only transformer layer (GPT, LLaMA) during prefill.
"""
import torch
import torch.nn as nn

batch_size = 8
num_heads = 8
seq_len = 256
head_dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * q.size(-1) ** -0.5
        length = q.size(-2)
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
