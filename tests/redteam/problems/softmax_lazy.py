"""LAZY OUTPUT (10_softmax_temperature): returns a tensor subclass that computes the
softmax the first time anything reads it: right values, an empty call to time. Caught
by "outputs are plain tensors"."""

import torch
import torch.nn as nn


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for value in (*args, *(kwargs or {}).values()):
            if isinstance(value, Deferred) and value.__dict__.get("thunk") is not None:
                thunk = value.__dict__.pop("thunk")
                with torch._C.DisableTorchFunctionSubclass():
                    value.copy_(thunk())
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        saved = logits.clone()
        out = torch.empty(logits.shape, dtype=logits.dtype).as_subclass(Deferred)
        out.__dict__["thunk"] = lambda: torch.softmax(saved / self.temperature, dim=-1)
        return out
