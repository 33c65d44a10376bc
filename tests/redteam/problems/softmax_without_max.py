"""SOFTMAX WITHOUT THE ROW MAXIMUM (10_softmax_temperature): exp(x / T) / sum(exp(x / T)),
exact for randn logits, inf / inf = NaN once a logit exceeds ~62. Caught by the
battery's inputs scaled by 1,000."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        e = torch.exp(logits / self.temperature)
        return e / e.sum(dim=-1, keepdim=True)
