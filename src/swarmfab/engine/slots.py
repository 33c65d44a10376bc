"""Kernel slots: every hot operator of the model is called through one of these.

A slot holds a callable. The two KDA slots take exactly the signature of a KDA workload
``forward`` (fla's: ``forward(q, k, v, g, beta, scale, initial_state,
output_final_state) -> (o, final_state)``, plus the pool keywords engines decode with,
``inplace_final_state`` and ``state_indices``), so a factory champion (a built C
candidate or an exported package) drops in unchanged; one without the pool keywords
gets them by gathering and scattering. The defaults are the PyTorch references: the
chunked form for prefill, the per-token recurrence for decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from swarmfab.workloads import Forward, get_workload, with_pools

__all__ = ["KernelSlots", "reference_attention", "reference_mlp", "reference_rms_norm"]

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float],
                     torch.Tensor]
Mlp = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
RmsNorm = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in float32."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def reference_mlp(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                  down: torch.Tensor) -> torch.Tensor:
    """SwiGLU: down(silu(gate x) * up x); weights in nn.Linear's [out, in] layout."""
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Softmax attention: q [B,H,Tq,D], k [B,H,L,D], v [B,H,L,Dv], mask [B,1,Tq,L] (True =
    may attend) -> [B,H,Tq,Dv]."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _kda_baseline(name: str) -> Forward:
    return get_workload("kda").baselines()[name]


@dataclass(frozen=True, slots=True)
class KernelSlots:
    """What fills each operator slot. Replace one with :meth:`with_kda` or ``replace``."""

    kda_prefill: Forward = field(default_factory=lambda: _kda_baseline("torch-chunked"))
    kda_decode: Forward = field(default_factory=lambda: _kda_baseline("torch-recurrent"))
    attention: Attention = reference_attention
    mlp: Mlp = reference_mlp
    rms_norm: RmsNorm = reference_rms_norm
    labels: dict[str, str] = field(default_factory=lambda: {
        "kda_prefill": "torch-chunked", "kda_decode": "torch-recurrent",
        "attention": "torch-sdpa", "mlp": "torch", "rms_norm": "torch"})

    def with_kda(self, forward: Forward, label: str, *, prefill: bool = True,
                 decode: bool = True) -> KernelSlots:
        """These slots with a KDA ``forward`` (e.g. a factory champion) in prefill/decode."""
        changes: dict[str, Any] = {}
        labels = dict(self.labels)
        for slot, wanted in (("kda_prefill", prefill), ("kda_decode", decode)):
            if wanted:
                changes[slot] = with_pools(forward)
                labels[slot] = label
        return replace(self, labels=labels, **changes)
