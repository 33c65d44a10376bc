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

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from swarmfab.engine.linear import Linear, checked
from swarmfab.errors import EngineError
from swarmfab.workloads import Forward, get_workload, with_pools

__all__ = ["MLA_DECODE", "MOE_EXPERTS", "KernelSlots", "absorbed_mla_decode",
           "dense_moe_experts", "expanded_mla_decode", "looped_moe_experts",
           "reference_attention", "reference_mlp", "reference_moe_experts",
           "reference_rms_norm"]

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float],
                     torch.Tensor]
Mlp = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Linear],
              torch.Tensor]
RmsNorm = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
MlaDecode = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float],
                     torch.Tensor]
MoeExperts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                       torch.Tensor, Linear], torch.Tensor]

# Below this many multiply-adds (tokens x every expert's weights), the routed experts run
# densely: every expert on every token in three batched matmuls, the unchosen ones
# weighted 0. Such experts are small enough that operator calls, not arithmetic, are the
# cost, and a loop over experts makes ~5 calls each. Above it, each expert runs on its own
# tokens only (a decode step of a 150M model already does 4x less arithmetic that way).
DENSE_EXPERT_MACS = 4_000_000


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in float32."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def reference_mlp(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                  down: torch.Tensor, linear: Linear = F.linear) -> torch.Tensor:
    """SwiGLU: down(silu(gate x) * up x); weights in nn.Linear's [out, in] layout."""
    return linear(F.silu(linear(x, gate)) * linear(x, up), down)


def absorbed_mla_decode(q: torch.Tensor, latents: torch.Tensor, mask: torch.Tensor,
                        kv_b: torch.Tensor, scale: float) -> torch.Tensor:
    """One query per sequence against its cached MLA latents, never expanded into keys
    and values (weight absorption): the query's position-free part is taken into latent
    space through kv_b's key half, scored against the latents there, and the context is
    brought out through kv_b's value half. q [D,H,nope+rope], latents [D,L,rank+rope]
    (the normed compressed part, then the shared rope part), mask [D,L] (True = may
    attend), kv_b [H*(nope+v), rank] -> [D,H,v]. Per cached position this costs
    2*H*rank multiply-adds instead of rank*H*(nope+v) for the expansion."""
    heads, rank = q.shape[1], kv_b.shape[1]
    rope = latents.shape[-1] - rank
    nope = q.shape[-1] - rope
    halves = kv_b.view(heads, -1, rank)
    key_half, value_half = halves[:, :nope], halves[:, nope:]          # [H,nope|v,rank]
    absorbed = torch.matmul(q[..., :nope].transpose(0, 1), key_half).transpose(0, 1)
    if rope:
        absorbed = torch.cat([absorbed, q[..., nope:]], dim=-1)         # [D,H,rank+rope]
    scores = torch.matmul(absorbed, latents.transpose(1, 2)) * scale    # [D,H,L]
    probs = scores.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)
    context = torch.matmul(probs, latents[..., :rank])                  # [D,H,rank]
    return torch.matmul(context.transpose(0, 1), value_half.transpose(1, 2)).transpose(0, 1)


def reference_moe_experts(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                          gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                          linear: Linear = F.linear) -> torch.Tensor:
    """The routed experts' weighted sum: x [N,H]; ``experts`` [N,k] chosen per token with
    ``weights`` [N,k]; SwiGLU experts gate/up [E,I,H], down [E,H,I] -> [N,H]. Dense below
    :data:`DENSE_EXPERT_MACS`, looped above."""
    dense = x.shape[0] * gate.numel() * 3 <= DENSE_EXPERT_MACS
    return (dense_moe_experts if dense else looped_moe_experts)(x, weights, experts, gate,
                                                                up, down, linear)


def dense_moe_experts(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                      gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                      linear: Linear = F.linear) -> torch.Tensor:
    """Every expert on every token in three batched matmuls, the unchosen weighted 0
    (``linear`` is not used: the matmuls are batched over experts)."""
    routed = x.new_zeros(x.shape[0], gate.shape[0]).scatter_(1, experts, weights.to(x.dtype))
    hidden = F.silu(torch.matmul(x, gate.transpose(1, 2))) * torch.matmul(
        x, up.transpose(1, 2))                                                  # [E,N,I]
    y = torch.matmul(hidden, down.transpose(1, 2))                              # [E,N,H]
    return torch.matmul(routed.unsqueeze(1), y.transpose(0, 1)).squeeze(1)      # [N,H]


def looped_moe_experts(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                       gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                       linear: Linear = F.linear) -> torch.Tensor:
    """Each expert on its own tokens only. The (token, choice) pairs are sorted by
    expert and their rows gathered once: each expert's pairs are one slice, whose
    outputs land in one slice of ``y``."""
    choices = experts.shape[1]
    order = experts.flatten().argsort(stable=True)
    counts = torch.bincount(experts.flatten(), minlength=gate.shape[0]).tolist()
    token = order // choices
    rows = x[token]
    y = torch.empty_like(rows)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            piece = rows[start:start + count]
            y[start:start + count] = linear(
                F.silu(linear(piece, gate[expert])) * linear(piece, up[expert]), down[expert])
            start += count
    routed = weights.flatten()[order, None].to(x.dtype)
    return torch.zeros_like(x).index_add_(0, token, y * routed)


def expanded_mla_decode(q: torch.Tensor, latents: torch.Tensor, mask: torch.Tensor,
                        kv_b: torch.Tensor, scale: float) -> torch.Tensor:
    """:func:`absorbed_mla_decode`'s contract, computed as prefill does: every cached
    latent expanded through kv_b into keys and values, then softmax attention. Dearer
    per cached position, but a few large matmuls instead of several small ones."""
    heads, rank = q.shape[1], kv_b.shape[1]
    rope = latents.shape[-1] - rank
    nope = q.shape[-1] - rope
    kv = F.linear(latents[..., :rank], kv_b).view(*latents.shape[:2], heads, -1)
    k_nope, values = kv[..., :nope], kv[..., nope:]                      # [D,L,H,nope|v]
    shared = latents[:, :, None, rank:].expand(-1, -1, heads, -1)
    keys = torch.cat([k_nope, shared], dim=-1)
    out = F.scaled_dot_product_attention(
        q[:, :, None], keys.transpose(1, 2), values.transpose(1, 2),
        attn_mask=mask[:, None, None, :], scale=scale)                    # [D,H,1,v]
    return out[:, :, 0]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Softmax attention: q [B,H,Tq,D], k [B,H,L,D], v [B,H,L,Dv], mask [B,1,Tq,L] (True =
    may attend) -> [B,H,Tq,Dv]."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# the choices a recipe names for the two MLA / MoE slots: name -> (callable, label)
MOE_EXPERTS: dict[str, tuple[MoeExperts, str]] = {
    "auto": (reference_moe_experts, "torch"), "dense": (dense_moe_experts, "torch-dense"),
    "loop": (looped_moe_experts, "torch-loop")}
MLA_DECODE: dict[str, tuple[MlaDecode, str]] = {
    "absorbed": (absorbed_mla_decode, "torch-absorbed"),
    "expanded": (expanded_mla_decode, "torch-expanded")}
_CHOICES: dict[str, Mapping[str, tuple[Any, str]]] = {"moe_experts": MOE_EXPERTS,
                                                     "mla_decode": MLA_DECODE}


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
    moe_experts: MoeExperts = reference_moe_experts
    mla_decode: MlaDecode = absorbed_mla_decode
    linear: str = "auto"  # each model resolves it (engine.linear.choose)
    labels: dict[str, str] = field(default_factory=lambda: {
        "kda_prefill": "torch-chunked", "kda_decode": "torch-recurrent",
        "attention": "torch-sdpa", "mlp": "torch", "rms_norm": "torch", "moe_experts": "torch",
        "mla_decode": "torch-absorbed", "linear": "auto"})

    def choosing(self, slot: str, name: str) -> KernelSlots:
        """These slots with ``moe_experts``, ``mla_decode`` or ``linear`` filled by the
        named choice (:data:`MOE_EXPERTS`, :data:`MLA_DECODE`, ``engine.linear.LINEARS``)."""
        if slot == "linear":
            return replace(self, linear=checked(name), labels={**self.labels, "linear": name})
        choices = _CHOICES[slot]
        if name not in choices:
            raise EngineError(f"{slot} must be one of {', '.join(choices)}, not {name!r}")
        forward, label = choices[name]
        return replace(self, labels={**self.labels, slot: label}, **{slot: forward})

    def with_exported(self, directory: Path) -> KernelSlots:
        """These slots with an exported champion's operator (``swarmfab export``'s
        directory, or the package inside it) in both KDA slots: its pooled form updates
        each layer's states where they lie, as the engine decodes."""
        package = import_exported(directory)
        return self.with_kda(package.forward, label=f"exported:{package.__name__}")

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


def import_exported(directory: Path) -> Any:
    """The package ``swarmfab export`` wrote under ``directory`` (or ``directory`` itself),
    imported from there; EngineError when there is none."""
    directory = directory.resolve()
    packages = ([directory] if (directory / "__init__.py").is_file() else
                sorted(p for p in directory.iterdir() if (p / "__init__.py").is_file()
                       and (p / "provenance.json").is_file()) if directory.is_dir() else [])
    if len(packages) != 1:
        raise EngineError(f"{directory} holds no exported champion (a package directory with "
                          "__init__.py and provenance.json, as `swarmfab export` writes)")
    package = packages[0]
    if str(package.parent) not in sys.path:
        sys.path.insert(0, str(package.parent))
    try:
        return importlib.import_module(package.name)
    except ImportError as exc:
        raise EngineError(f"the exported champion {package} does not import here: {exc}"
                          ) from exc
