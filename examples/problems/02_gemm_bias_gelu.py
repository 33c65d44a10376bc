"""Linear layer, an extra learned bias, then the tanh-approximated GELU written out.

The first half of a transformer MLP block (GPT-2 / BERT feed-forward up-projection).
"""
import torch
import torch.nn as nn

batch_size = 256
in_features = 1024
out_features = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        x = self.linear(x) + self.bias
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi)
        return 0.5 * x * (1.0 + torch.tanh(inner))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
