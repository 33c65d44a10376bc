"""The hybrid decoder of the Kimi Linear family, over ragged batches.

One forward pass serves a whole scheduler step: every sequence's new tokens are packed
into one ``[N, hidden]`` matrix (no padding), decodes first (one token each), then
prefill chunks. Projections, norms and MLPs run over all N tokens at once; the sequence
mixers read and write per-sequence memory: KDA layers their state slot (recurrent state
and convolution window, carried across prefill chunks), attention layers the paged
latent cache. Decodes make one batched call per mixer. Prefill chunks are batched too:
they are gathered into groups of similar length, right-padded (:class:`PrefillGroup`),
and each group makes one call per mixer. A padded KDA position has ``g = 0`` and
``beta = 0``, so it leaves a state exactly as it was; its outputs are dropped. Every hot
operator goes through :class:`~swarmfab.engine.slots.KernelSlots`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from swarmfab.engine.cache import KvCache, StateSlots
from swarmfab.engine.config import ModelConfig, load_config
from swarmfab.engine.linear import choose
from swarmfab.engine.slots import KernelSlots
from swarmfab.engine.weights import (
    AttentionWeights,
    KdaWeights,
    MlpWeights,
    ModelWeights,
    MoeWeights,
    load_weights,
)

__all__ = ["HybridModel", "PrefillGroup", "StepBatch", "prefill_groups"]


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


@dataclass(frozen=True, slots=True)
class PrefillGroup:
    """Prefill chunks run together, right-padded to the longest."""

    seqs: torch.Tensor       # [P] the sequences' indices in the step
    rows: torch.Tensor       # [P, T] packed row of each position (0 where padded)
    valid: torch.Tensor      # [P, T] True where a position is real
    lengths: torch.Tensor    # [P] new tokens per sequence
    slots: torch.Tensor      # [P] KDA state slots

    first: int | None = None  # the group's first row when it is unpadded and contiguous

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """``x[N, ...]`` as ``[P, T, ...]``, zero where padded (a view of ``x`` when the
        chunks are of one length and adjacent: read it, never write it)."""
        if self.first is not None:
            count = self.rows.numel()
            return x[self.first:self.first + count].view(*self.rows.shape, *x.shape[1:])
        mask = self.valid.view(*self.valid.shape, *(1,) * (x.dim() - 1))
        return x[self.rows].masked_fill(~mask, 0)

    def scatter(self, out: torch.Tensor, padded: torch.Tensor) -> None:
        """Write the real positions of ``padded[P, T, ...]`` back into ``out[N, ...]``."""
        if self.first is not None:
            count = self.rows.numel()
            out[self.first:self.first + count] = padded.reshape(count, *padded.shape[2:])
            return
        out[self.rows[self.valid]] = padded[self.valid].to(out.dtype)


def prefill_groups(batch: StepBatch, waste: float = 2.0) -> list[PrefillGroup]:
    """The step's prefill chunks in groups, longest first; a group takes the next chunk
    while its padded size stays within ``waste`` times its real tokens."""
    lens = batch.query_lens
    first_row = list(itertools.accumulate(lens, initial=0))   # of each sequence's tokens
    members: list[list[int]] = []   # sequence indices, each group longest first
    for seq in sorted(range(batch.num_decodes, len(lens)), key=lambda s: -lens[s]):
        group = members[-1] if members else None
        if group and lens[group[0]] * (len(group) + 1) <= waste * (
                sum(lens[s] for s in group) + lens[seq]):
            group.append(seq)
        else:
            members.append([seq])
    groups = []
    for seqs in members:
        lengths = torch.tensor([lens[s] for s in seqs])
        width = int(lengths.max())
        valid = torch.arange(width)[None, :] < lengths[:, None]
        first = torch.tensor([first_row[s] for s in seqs])
        rows = torch.where(valid, first[:, None] + torch.arange(width)[None, :], 0)
        # chunks of one length, each starting where the last ends: the packed rows are
        # already the [P, T] block, so gathering and scattering are a view and a copy
        adjacent = all(lens[s] == width and first_row[s] == first_row[seqs[0]] + i * width
                       for i, s in enumerate(seqs))
        groups.append(PrefillGroup(torch.tensor(seqs), rows, valid, lengths,
                                   torch.tensor([batch.state_slots[s] for s in seqs]),
                                   first_row[seqs[0]] if adjacent else None))
    return groups


def _tensors(record: object) -> list[torch.Tensor]:
    """Every tensor in a (nested) weights record."""
    if isinstance(record, torch.Tensor):
        return [record]
    if isinstance(record, tuple | list):
        return [t for item in record for t in _tensors(item)]
    if hasattr(record, "__slots__"):
        return [t for name in record.__slots__ for t in _tensors(getattr(record, name))]
    return []


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
        # every projection that reads a mixer's input, stacked: one matmul per layer
        self._inputs: dict[int, tuple[torch.Tensor, list[int]]] = {}
        for index, layer in enumerate(weights.layers):
            mixer = layer.mixer
            parts = ([mixer.qkv, mixer.f_a, mixer.b_proj, mixer.g_a]
                     if isinstance(mixer, KdaWeights) else [mixer.q_proj, mixer.kv_a])
            self._inputs[index] = (torch.cat(parts), [p.shape[0] for p in parts])
        # every weight-stationary matmul goes through this (engine.linear: F.linear, or
        # oneDNN with packed weights, "auto" timed here on the first input projection)
        self.linear, self.linear_name = choose(self.slots.linear, self._inputs[0][0])

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight the model holds (the stacked input projections aside)."""
        return sum(t.numel() * t.element_size() for t in _tensors(self.weights))

    @classmethod
    def from_pretrained(cls, model_dir: Path, slots: KernelSlots | None = None,
                        dtype: torch.dtype = torch.float32) -> HybridModel:
        config = load_config(model_dir)
        return cls(config, load_weights(model_dir, config, dtype), slots)

    @torch.inference_mode()
    def forward(self, batch: StepBatch, states: StateSlots, kv: KvCache) -> torch.Tensor:
        """Logits ``[len(sample_rows), vocab]``; states and cache updated in place."""
        hidden = self.weights.embed[batch.token_ids]
        eps = self.config.rms_norm_eps
        groups = prefill_groups(batch)
        decode_slots = torch.tensor(batch.state_slots[:batch.num_decodes])
        for index, layer in enumerate(self.weights.layers):
            normed = self.slots.rms_norm(hidden, layer.input_norm, eps)
            stacked, sizes = self._inputs[index]
            projected = self.linear(normed, stacked).split(sizes, dim=-1)
            if isinstance(layer.mixer, KdaWeights):
                mixed = self._kda(projected, layer.mixer, batch, groups, decode_slots, states,
                                  self._kda_index[index])
            else:
                mixed = self._attention(projected, layer.mixer, batch, groups, kv,
                                        self._attention_index[index])
            hidden = hidden + mixed
            normed = self.slots.rms_norm(hidden, layer.post_norm, eps)
            hidden = hidden + self._mlp(normed, layer.mlp)
        last = self.slots.rms_norm(hidden[batch.sample_rows], self.weights.norm, eps)
        return self.linear(last, self.weights.lm_head)

    # -- KDA ---------------------------------------------------------------------------
    def _kda(self, projected: tuple[torch.Tensor, ...], w: KdaWeights, batch: StepBatch,
             groups: list[PrefillGroup], decode_slots: torch.Tensor, states: StateSlots,
             layer: int) -> torch.Tensor:
        heads, dim = self.config.linear_heads, self.config.linear_head_dim
        qkv, f_a, b_proj, g_a = projected
        tokens = qkv.shape[0]
        mixed = F.silu(self._short_conv(qkv, w.conv, batch.num_decodes,
                                        groups, decode_slots, states.conv[layer]))
        q, k, v = mixed.view(tokens, 3, heads, dim).unbind(1)
        q, k = _l2norm(q.float()), _l2norm(k.float())
        gate = self.linear(f_a, w.f_b).float() + w.dt_bias
        g = (-w.decay_rate * F.softplus(gate.view(tokens, heads, dim), threshold=20.0))
        beta = torch.sigmoid(b_proj.float())
        out = self._delta_rule(q, k, v.float(), g, beta, batch.num_decodes, groups,
                               decode_slots, states.recurrent[layer])
        normed = self.slots.rms_norm(out, w.o_norm.float(), self.config.rms_norm_eps)
        output_gate = self.linear(g_a, w.g_b).view(tokens, heads, dim)
        gated = (normed * torch.sigmoid(output_gate.float())).to(qkv.dtype)
        return self.linear(gated.reshape(tokens, heads * dim), w.o_proj)

    def _short_conv(self, x: torch.Tensor, weight: torch.Tensor, decodes: int,
                    groups: list[PrefillGroup], decode_slots: torch.Tensor,
                    windows: torch.Tensor) -> torch.Tensor:
        """Causal depthwise convolution whose window continues from each slot's history."""
        out = torch.empty_like(x)
        kernel = weight.shape[1]
        if decodes:
            window = torch.cat([windows[decode_slots], x[:decodes, None]], dim=1)  # [D,k,C]
            out[:decodes] = (window * weight.t()).sum(1)
            windows[decode_slots] = window[:, 1:]
        for group in groups:
            window = torch.cat([windows[group.slots], group.gather(x)], dim=1)  # [P,k-1+T,C]
            steps = window.shape[1] - kernel + 1
            conv = window[:, :steps] * weight[:, 0]   # one multiply-add per tap: an
            for tap in range(1, kernel):              # einsum over unfolded windows
                conv.addcmul_(window[:, tap:tap + steps], weight[:, tap])  # copies them
            group.scatter(out, conv)
            last = group.lengths[:, None] + torch.arange(kernel - 1)          # [P, k-1]
            windows[group.slots] = window.gather(
                1, last[..., None].expand(-1, -1, window.shape[-1]))
        return out

    def _delta_rule(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                    beta: torch.Tensor, decodes: int, groups: list[PrefillGroup],
                    decode_slots: torch.Tensor, recurrent: torch.Tensor) -> torch.Tensor:
        """KDA over every sequence: one batched decode call and one prefill call per
        group, each updating its sequences' states in place in the layer's pool."""
        scale = self.config.linear_head_dim ** -0.5
        out = torch.empty_like(v)
        if decodes:
            o, _ = self.slots.kda_decode(
                *(x[:decodes].unsqueeze(1) for x in (q, k, v, g, beta)), scale=scale,
                initial_state=recurrent, output_final_state=True, inplace_final_state=True,
                state_indices=decode_slots)
            out[:decodes] = o[:, 0]
        for group in groups:
            o, _ = self.slots.kda_prefill(
                *(group.gather(x) for x in (q, k, v, g, beta)), scale=scale,
                initial_state=recurrent, output_final_state=True, inplace_final_state=True,
                state_indices=group.slots)
            group.scatter(out, o)
        return out

    # -- MLA ---------------------------------------------------------------------------
    def _attention(self, projected: tuple[torch.Tensor, ...], w: AttentionWeights,
                   batch: StepBatch, groups: list[PrefillGroup], kv: KvCache, layer: int
                   ) -> torch.Tensor:
        c = self.config
        heads, nope, rope = c.attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim
        q, latent = projected
        tokens = q.shape[0]
        q = q.view(tokens, heads, nope + rope)
        compressed = self.slots.rms_norm(latent[:, :c.kv_lora_rank], w.kv_a_norm,
                                         c.rms_norm_eps)
        rows = kv.latents[layer]
        rows[batch.kv_rows] = torch.cat([compressed, latent[:, c.kv_lora_rank:]], dim=-1)
        out = torch.empty(tokens, heads, c.v_head_dim, dtype=q.dtype)
        decodes = batch.num_decodes
        if decodes:
            lens = torch.tensor(batch.context_lens[:decodes])
            width = int(lens.max())
            out[:decodes] = self.slots.mla_decode(
                q[:decodes], rows[batch.context_rows[:decodes, :width]],
                torch.arange(width) < lens[:, None], w.kv_b, self._scale)
        for group in groups:
            totals = torch.tensor(batch.context_lens)[group.seqs]
            width, steps = int(totals.max()), group.rows.shape[1]
            keys, values = self._expand(rows[batch.context_rows[group.seqs, :width]], w)
            positions = (totals - group.lengths)[:, None] + torch.arange(steps)   # [P, T]
            mask = torch.arange(width)[None, None, :] <= positions[..., None]     # [P, T, L]
            mask &= torch.arange(width)[None, None, :] < totals[:, None, None]
            queries = group.gather(q).transpose(1, 2)                            # [P,H,T,D]
            group.scatter(out, self.slots.attention(queries, keys, values, mask[:, None],
                                                    self._scale).transpose(1, 2))
        return self.linear(out.reshape(tokens, -1), w.o_proj)

    @property
    def _scale(self) -> float:
        return float((self.config.qk_nope_head_dim + self.config.qk_rope_head_dim) ** -0.5)

    def _expand(self, latents: torch.Tensor, w: AttentionWeights
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys ``[B,H,L,nope+rope]`` and values ``[B,H,L,v]`` from cached latents."""
        c = self.config
        batch, length, _ = latents.shape
        kv = self.linear(latents[..., :c.kv_lora_rank], w.kv_b)
        kv = kv.view(batch, length, c.attention_heads, c.qk_nope_head_dim + c.v_head_dim)
        k_nope, values = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)
        shared = latents[:, :, None, c.kv_lora_rank:].expand(-1, -1, c.attention_heads, -1)
        keys = torch.cat([k_nope, shared], dim=-1)
        return keys.transpose(1, 2), values.transpose(1, 2)

    # -- MLP and MoE -------------------------------------------------------------------
    def _mlp(self, x: torch.Tensor, w: MlpWeights | MoeWeights) -> torch.Tensor:
        if isinstance(w, MlpWeights):
            return self.slots.mlp(x, w.gate, w.up, w.down, self.linear)
        weights, experts = self._route(x, w)
        out = self.slots.moe_experts(x, weights, experts, w.gate, w.up, w.down, self.linear)
        if w.shared is not None:
            out = out + self.slots.mlp(x, w.shared.gate, w.shared.up, w.shared.down,
                                       self.linear)
        return out

    def _route(self, x: torch.Tensor, w: MoeWeights) -> tuple[torch.Tensor, torch.Tensor]:
        """Sigmoid router with a bias for the choice only, group-limited, renormalised."""
        c = self.config
        scores = torch.sigmoid(self.linear(x.float(), w.router))
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
