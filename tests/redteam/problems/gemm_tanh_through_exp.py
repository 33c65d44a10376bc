"""TANH THROUGH exp(2y) (02_gemm_bias_gelu): tanh(y) = (exp(2y) - 1) / (exp(2y) + 1), fine
for the values randn draws, inf / inf = NaN once an activation is large. Caught by the
battery's inputs scaled by 1,000 (the file's own Model answers them)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        x = self.linear(x) + self.bias
        twice = torch.exp(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x))
        return 0.5 * x * (1.0 + (twice - 1.0) / (twice + 1.0))
