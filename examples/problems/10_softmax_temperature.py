"""Softmax with temperature: softmax(x / T) over the last dimension.

Turns logits into sampling probabilities in LLM decoding and distillation losses.
"""
import torch
import torch.nn as nn

batch_size = 256
vocab_size = 32768
temperature = 0.7


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        return torch.softmax(logits / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, vocab_size)]


def get_init_inputs():
    return [temperature]
