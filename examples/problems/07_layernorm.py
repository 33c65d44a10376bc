"""LayerNorm over the hidden dimension with learned scale and shift.

Used before (or after) every attention and MLP sub-block of BERT / GPT-2 style transformers.
"""
import torch
import torch.nn as nn

batch_size = 16
seq_len = 512
hidden = 1024


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
