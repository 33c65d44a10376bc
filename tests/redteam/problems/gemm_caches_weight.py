"""STALE PREPARED WEIGHTS (02_gemm_bias_gelu): the first call keeps a transposed copy of
the weight and every later call multiplies by it, whatever weights are loaded since.
Its parameters never change. Caught when the live module is given other weights (the
battery's cases share sizes and differ in weights, as a checkpoint reload does)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)
        self.prepared = None

    def forward(self, x):
        if self.prepared is None:
            self.prepared = self.linear.weight.detach().t().contiguous()
        x = torch.addmm(self.bias, x, self.prepared)
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))
