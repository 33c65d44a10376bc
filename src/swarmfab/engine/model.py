"""The hybrid decoder of the Kimi Linear family, over ragged batches.

One forward pass serves a whole scheduler step: every sequence's new tokens are packed
into one ``[N, hidden]`` matrix (no padding), decodes first (one token each), then
prefill chunks. Projections, norms and MLPs run over all N tokens at once; the sequence
mixers read and write per-sequence memory: KDA layers their state slot (recurrent state
and convolution window, carried across prefill chunks), attention layers the paged
latent cache. Every hot operator goes through :class:`~swarmfab.engine.slots.KernelSlots`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from swarmfab.engine.cache import KvCache, StateSlots
from swarmfab.engine.config import ModelConfig, load_config
from swarmfab.engine.slots import KernelSlots
from swarmfab.engine.weights import (
    AttentionWeights,
    KdaWeights,
    MlpWeights,
    ModelWeights,
    MoeWeights,
    load_weights,
)

__all__ = ["HybridModel", "StepBatch"]


@dataclass(frozen=True, slots=True)
class StepBatch:
    """One step's packed tokens and where each sequence's memory lives."""

    token_ids: torch.Tensor          # [N] new tokens, decodes first
    query_lens: tuple[int, ...]      # new tokens per sequence
    num_decodes: int                 # the first num_decodes sequences have one token each
    state_slots: tuple[int, ...]     # KDA slot per sequence
    kv_rows: torch.Tensor            # [N] latent-pool row written by each new token
    context_rows: torch.Tensor       # [S, Lmax] pool rows of every position, padded with 0
    context_lens: tuple[int, ...]    # positions per sequence after this step
    sample_rows: torch.Tensor        # [S'] rows of N whose logits are wanted


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """fla's l2norm: x / sqrt(sum(x^2) + 1e-6) (eps inside the root)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


class HybridModel:
    """KDA and MLA layers with dense or MoE MLPs; weights are plain tensors."""

    def __init__(self, config: ModelConfig, weights: ModelWeights,
                 slots: KernelSlots | None = None):
        self.config = config
        self.weights = weights
        self.slots = slots or KernelSlots()
        self.dtype = weights.embed.dtype
        self._kda_index = {layer: i for i, layer in enumerate(config.kda_layers)}
        self._attention_index = {layer: i for i, layer in enumerate(config.attention_layers)}

    @classmethod
    def from_pretrained(cls, model_dir: Path, slots: KernelSlots | None = None) -> HybridModel:
        config = load_config(model_dir)
        return cls(config, load_weights(model_dir, config), slots)

    @torch.inference_mode()
    def forward(self, batch: StepBatch, states: StateSlots, kv: KvCache) -> torch.Tensor:
        """Logits ``[len(sample_rows), vocab]``; states and cache updated in place."""
        hidden = self.weights.embed[batch.token_ids]
        eps = self.config.rms_norm_eps
        for index, layer in enumerate(self.weights.layers):
            normed = self.slots.rms_norm(hidden, layer.input_norm, eps)
            if isinstance(layer.mixer, KdaWeights):
                mixed = self._kda(normed, layer.mixer, batch, states, self._kda_index[index])
            else:
                mixed = self._attention(normed, layer.mixer, batch, kv,
                                        self._attention_index[index])
            hidden = hidden + mixed
            normed = self.slots.rms_norm(hidden, layer.post_norm, eps)
            hidden = hidden + self._mlp(normed, layer.mlp)
        last = self.slots.rms_norm(hidden[batch.sample_rows], self.weights.norm, eps)
        return F.linear(last, self.weights.lm_head)

    # -- KDA ---------------------------------------------------------------------------
    def _kda(self, x: torch.Tensor, w: KdaWeights, batch: StepBatch, states: StateSlots,
             layer: int) -> torch.Tensor:
        heads, dim = self.config.linear_heads, self.config.linear_head_dim
        tokens = x.shape[0]
        mixed = F.silu(self._short_conv(F.linear(x, w.qkv), w.conv, batch, states.conv[layer]))
        q, k, v = mixed.view(tokens, 3, heads, dim).unbind(1)
        q, k = _l2norm(q.float()), _l2norm(k.float())
        gate = F.linear(F.linear(x, w.f_a), w.f_b).float() + w.dt_bias
        g = (-w.decay_rate * F.softplus(gate.view(tokens, heads, dim), threshold=20.0))
        beta = torch.sigmoid(F.linear(x, w.b_proj).float())
        out = self._delta_rule(q, k, v.float(), g, beta, batch, states.recurrent[layer])
        normed = self.slots.rms_norm(out, w.o_norm.float(), self.config.rms_norm_eps)
        output_gate = F.linear(F.linear(x, w.g_a), w.g_b).view(tokens, heads, dim)
        gated = (normed * torch.sigmoid(output_gate.float())).to(x.dtype)
        return F.linear(gated.reshape(tokens, heads * dim), w.o_proj)

    def _short_conv(self, x: torch.Tensor, weight: torch.Tensor, batch: StepBatch,
                    windows: torch.Tensor) -> torch.Tensor:
        """Causal depthwise convolution whose window continues from each slot's history."""
        out = torch.empty_like(x)
        decodes = batch.num_decodes
        if decodes:
            slots = torch.tensor(batch.state_slots[:decodes])
            window = torch.cat([windows[slots], x[:decodes, None]], dim=1)   # [D, kernel, C]
            out[:decodes] = torch.einsum("dkc,ck->dc", window, weight)
            windows[slots] = window[:, 1:]
        start = decodes
        for seq in range(decodes, len(batch.query_lens)):
            length, slot = batch.query_lens[seq], batch.state_slots[seq]
            window = torch.cat([windows[slot], x[start:start + length]])     # [k-1+T, C]
            out[start:start + length] = torch.einsum(
                "tck,ck->tc", window.unfold(0, weight.shape[1], 1), weight)
            windows[slot] = window[-(weight.shape[1] - 1):]
            start += length
        return out

    def _delta_rule(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                    beta: torch.Tensor, batch: StepBatch, recurrent: torch.Tensor
                    ) -> torch.Tensor:
        """KDA over every sequence: one batched decode call, one prefill call per chunk,
        each updating its sequences' states in place in the layer's pool of slots."""
        scale = self.config.linear_head_dim ** -0.5
        out = torch.empty_like(v)
        decodes = batch.num_decodes
        if decodes:
            o, _ = self.slots.kda_decode(
                *(x[:decodes].unsqueeze(1) for x in (q, k, v, g, beta)), scale=scale,
                initial_state=recurrent, output_final_state=True, inplace_final_state=True,
                state_indices=torch.tensor(batch.state_slots[:decodes]))
            out[:decodes] = o[:, 0]
        start = decodes
        for seq in range(decodes, len(batch.query_lens)):
            length, slot = batch.query_lens[seq], batch.state_slots[seq]
            piece = slice(start, start + length)
            o, _ = self.slots.kda_prefill(
                *(x[piece].unsqueeze(0) for x in (q, k, v, g, beta)), scale=scale,
                initial_state=recurrent, output_final_state=True, inplace_final_state=True,
                state_indices=torch.tensor([slot]))
            out[piece] = o[0]
            start += length
        return out

    # -- MLA ---------------------------------------------------------------------------
    def _attention(self, x: torch.Tensor, w: AttentionWeights, batch: StepBatch, kv: KvCache,
                   layer: int) -> torch.Tensor:
        c = self.config
        heads, nope, rope = c.attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim
        tokens = x.shape[0]
        q = F.linear(x, w.q_proj).view(tokens, heads, nope + rope)
        latent = F.linear(x, w.kv_a)
        compressed = self.slots.rms_norm(latent[:, :c.kv_lora_rank], w.kv_a_norm,
                                         c.rms_norm_eps)
        rows = kv.latents[layer]
        rows[batch.kv_rows] = torch.cat([compressed, latent[:, c.kv_lora_rank:]], dim=-1)
        out = torch.empty(tokens, heads, c.v_head_dim, dtype=x.dtype)
        decodes = batch.num_decodes
        if decodes:
            lens = torch.tensor(batch.context_lens[:decodes])
            width = int(lens.max())
            keys, values = self._expand(rows[batch.context_rows[:decodes, :width]], w)
            mask = (torch.arange(width) < lens[:, None])[:, None, None, :]
            out[:decodes] = self.slots.attention(
                q[:decodes, :, None], keys, values, mask, self._scale)[:, :, 0]
        start = decodes
        for seq in range(decodes, len(batch.query_lens)):
            length, total = batch.query_lens[seq], batch.context_lens[seq]
            keys, values = self._expand(rows[batch.context_rows[seq, :total]][None], w)
            past = total - length
            mask = torch.arange(total)[None, :] <= (past + torch.arange(length))[:, None]
            piece = slice(start, start + length)
            out[piece] = self.slots.attention(
                q[piece].transpose(0, 1)[None], keys, values, mask[None, None],
                self._scale)[0].transpose(0, 1)
            start += length
        return F.linear(out.reshape(tokens, -1), w.o_proj)

    @property
    def _scale(self) -> float:
        return float((self.config.qk_nope_head_dim + self.config.qk_rope_head_dim) ** -0.5)

    def _expand(self, latents: torch.Tensor, w: AttentionWeights
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys ``[B,H,L,nope+rope]`` and values ``[B,H,L,v]`` from cached latents."""
        c = self.config
        batch, length, _ = latents.shape
        kv = F.linear(latents[..., :c.kv_lora_rank], w.kv_b)
        kv = kv.view(batch, length, c.attention_heads, c.qk_nope_head_dim + c.v_head_dim)
        k_nope, values = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)
        shared = latents[:, :, None, c.kv_lora_rank:].expand(-1, -1, c.attention_heads, -1)
        keys = torch.cat([k_nope, shared], dim=-1)
        return keys.transpose(1, 2), values.transpose(1, 2)

    # -- MLP and MoE -------------------------------------------------------------------
    def _mlp(self, x: torch.Tensor, w: MlpWeights | MoeWeights) -> torch.Tensor:
        if isinstance(w, MlpWeights):
            return self.slots.mlp(x, w.gate, w.up, w.down)
        weights, experts = self._route(x, w)
        out = torch.zeros_like(x)
        for expert in experts.unique().tolist():
            token, choice = torch.where(experts == expert)
            y = self.slots.mlp(x[token], w.gate[expert], w.up[expert], w.down[expert])
            out.index_add_(0, token, y * weights[token, choice, None].to(x.dtype))
        if w.shared is not None:
            out = out + self.slots.mlp(x, w.shared.gate, w.shared.up, w.shared.down)
        return out

    def _route(self, x: torch.Tensor, w: MoeWeights) -> tuple[torch.Tensor, torch.Tensor]:
        """Sigmoid router with a bias for the choice only, group-limited, renormalised."""
        c = self.config
        scores = torch.sigmoid(F.linear(x.float(), w.router))
        choice = scores + w.router_bias
        if c.expert_groups > 1:
            grouped = choice.view(x.shape[0], c.expert_groups, -1)
            group_scores = grouped.topk(2, dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_scores).scatter_(
                1, group_scores.topk(c.topk_groups, dim=-1).indices, 1.0).bool()
            choice = grouped.masked_fill(~keep[..., None], float("-inf")).view_as(choice)
        experts = choice.topk(c.experts_per_token, dim=-1).indices
        weights = scores.gather(1, experts)
        if c.renormalize:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * c.routed_scaling, experts
