"""Checkpoint tensors, renamed into the engine's per-layer records.

Kimi Linear checkpoints (Moonshot's, and what ``save_pretrained`` writes) keep q/k/v
short-convolution weights apart (``q_conv1d``...) and MoE experts one by one
(``block_sparse_moe.experts.N.w1/w2/w3``); Hugging Face's in-memory modules fuse both
(``conv1d``, ``mlp.experts.gate_up_proj``). Either spelling loads; the engine fuses
q/k/v projections so a layer makes one matmul where the checkpoint has three.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmfab.engine.config import ModelConfig
from swarmfab.errors import EngineError, import_extra

__all__ = ["AttentionWeights", "KdaWeights", "MlpWeights", "ModelWeights", "MoeWeights",
           "load_weights", "parameter_count"]


@dataclass(frozen=True, slots=True)
class KdaWeights:
    qkv: torch.Tensor          # [3*H*D, hidden]: q, k, v projections stacked
    conv: torch.Tensor         # [3*H*D, kernel]: depthwise short convolution
    f_a: torch.Tensor
    f_b: torch.Tensor
    dt_bias: torch.Tensor      # [H*D]
    decay_rate: torch.Tensor   # exp(A_log), [H, 1]
    b_proj: torch.Tensor
    g_a: torch.Tensor
    g_b: torch.Tensor
    o_norm: torch.Tensor
    o_proj: torch.Tensor


@dataclass(frozen=True, slots=True)
class AttentionWeights:
    q_proj: torch.Tensor
    kv_a: torch.Tensor
    kv_a_norm: torch.Tensor
    kv_b: torch.Tensor
    o_proj: torch.Tensor


@dataclass(frozen=True, slots=True)
class MlpWeights:
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True, slots=True)
class MoeWeights:
    router: torch.Tensor       # [E, hidden], float32
    router_bias: torch.Tensor  # [E] e_score_correction_bias
    gate: torch.Tensor         # [E, I, hidden]
    up: torch.Tensor
    down: torch.Tensor         # [E, hidden, I]
    shared: MlpWeights | None


@dataclass(frozen=True, slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    mixer: KdaWeights | AttentionWeights
    mlp: MlpWeights | MoeWeights


@dataclass(frozen=True, slots=True)
class ModelWeights:
    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor
    lm_head: torch.Tensor


class _Tensors:
    """A name -> tensor mapping that says which name is missing."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype):
        self._tensors = tensors
        self._dtype = dtype

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, *names: str) -> torch.Tensor:
        for name in names:
            if name in self._tensors:
                return self._tensors[name].to(self._dtype).contiguous()
        raise EngineError(f"checkpoint lacks tensor {names[0]}")


def _kda(t: _Tensors, p: str) -> KdaWeights:
    if t.has(f"{p}.conv1d.weight"):
        conv = t.get(f"{p}.conv1d.weight")
    else:
        conv = torch.cat([t.get(f"{p}.{x}_conv1d.weight") for x in "qkv"])
    return KdaWeights(
        qkv=torch.cat([t.get(f"{p}.{x}_proj.weight") for x in "qkv"]),
        conv=conv.squeeze(1).contiguous(),
        f_a=t.get(f"{p}.f_a_proj.weight", f"{p}.forget_gate.f_a_proj.weight"),
        f_b=t.get(f"{p}.f_b_proj.weight", f"{p}.forget_gate.f_b_proj.weight"),
        dt_bias=t.get(f"{p}.dt_bias", f"{p}.forget_gate.dt_bias").float().reshape(-1),
        decay_rate=t.get(f"{p}.A_log", f"{p}.forget_gate.A_log").float().exp().reshape(-1, 1),
        b_proj=t.get(f"{p}.b_proj.weight"),
        g_a=t.get(f"{p}.g_a_proj.weight"),
        g_b=t.get(f"{p}.g_b_proj.weight"),
        o_norm=t.get(f"{p}.o_norm.weight"),
        o_proj=t.get(f"{p}.o_proj.weight"),
    )


def _attention(t: _Tensors, p: str) -> AttentionWeights:
    return AttentionWeights(
        q_proj=t.get(f"{p}.q_proj.weight"),
        kv_a=t.get(f"{p}.kv_a_proj_with_mqa.weight"),
        kv_a_norm=t.get(f"{p}.kv_a_layernorm.weight"),
        kv_b=t.get(f"{p}.kv_b_proj.weight"),
        o_proj=t.get(f"{p}.o_proj.weight"),
    )


def _dense(t: _Tensors, p: str) -> MlpWeights:
    return MlpWeights(*(t.get(f"{p}.{x}_proj.weight") for x in ("gate", "up", "down")))


def _moe(t: _Tensors, p: str, config: ModelConfig) -> MoeWeights:
    if t.has(f"{p}.experts.gate_up_proj"):
        gate, up = t.get(f"{p}.experts.gate_up_proj").chunk(2, dim=1)
        down = t.get(f"{p}.experts.down_proj")
    else:  # one tensor per expert: w1 = gate, w3 = up, w2 = down (Mixtral's naming)
        experts = range(config.num_experts)
        gate = torch.stack([t.get(f"{p}.experts.{e}.w1.weight") for e in experts])
        up = torch.stack([t.get(f"{p}.experts.{e}.w3.weight") for e in experts])
        down = torch.stack([t.get(f"{p}.experts.{e}.w2.weight") for e in experts])
    shared = _dense(t, f"{p}.shared_experts") if config.shared_experts else None
    return MoeWeights(
        router=t.get(f"{p}.gate.weight").float(),
        router_bias=t.get(f"{p}.gate.e_score_correction_bias").float(),
        gate=gate.contiguous(), up=up.contiguous(), down=down.contiguous(), shared=shared,
    )


def _layer(t: _Tensors, index: int, config: ModelConfig) -> LayerWeights:
    p = f"model.layers.{index}"
    mixer: KdaWeights | AttentionWeights = (
        _kda(t, f"{p}.self_attn") if config.layer_types[index] == "linear_attention"
        else _attention(t, f"{p}.self_attn"))
    mlp_prefix = next((f"{p}.{name}" for name in ("block_sparse_moe", "mlp")
                       if any(t.has(f"{p}.{name}.{x}") for x in
                              ("gate_proj.weight", "gate.weight"))), f"{p}.mlp")
    mlp: MlpWeights | MoeWeights = (
        _moe(t, mlp_prefix, config) if config.mlp_types[index] == "sparse"
        else _dense(t, mlp_prefix))
    return LayerWeights(
        input_norm=t.get(f"{p}.input_layernorm.weight"),
        post_norm=t.get(f"{p}.post_attention_layernorm.weight"),
        mixer=mixer, mlp=mlp,
    )


def weights_from_tensors(tensors: Mapping[str, torch.Tensor], config: ModelConfig,
                         dtype: torch.dtype = torch.float32) -> ModelWeights:
    """The engine's records from a checkpoint's name -> tensor mapping."""
    t = _Tensors(tensors, dtype)
    return ModelWeights(
        embed=t.get("model.embed_tokens.weight"),
        layers=tuple(_layer(t, i, config) for i in range(len(config.layer_types))),
        norm=t.get("model.norm.weight"),
        lm_head=t.get("lm_head.weight", "model.embed_tokens.weight"),
    )


def load_weights(model_dir: Path, config: ModelConfig,
                 dtype: torch.dtype = torch.float32) -> ModelWeights:
    """Every ``*.safetensors`` file of ``model_dir`` (shards included)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise EngineError(f"{model_dir} holds no *.safetensors file")
    safetensors = _safetensors()
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(import_extra("safetensors.torch", "engine",
                                        "loading a checkpoint").load_file(str(file)))
        except (safetensors.SafetensorError, OSError) as exc:
            raise EngineError(f"cannot read {file}: {exc}") from exc
    return weights_from_tensors(tensors, config, dtype)


def parameter_count(model_dir: Path) -> int:
    """How many parameters the checkpoint's safetensors files hold (read from their
    headers: no tensor is loaded)."""
    safetensors = _safetensors()
    total = 0
    try:
        for path in sorted(model_dir.glob("*.safetensors")):
            with safetensors.safe_open(str(path), framework="pt") as tensors:
                for name in tensors.keys():  # noqa: SIM118 (a safe_open is no mapping)
                    total += math.prod(tensors.get_slice(name).get_shape())
    except (OSError, safetensors.SafetensorError) as exc:
        raise EngineError(f"cannot read the weights of {model_dir}: {exc}") from exc
    return total


def _safetensors() -> Any:
    """The safetensors package (the engine extra), imported where a checkpoint is read."""
    return import_extra("safetensors", "engine", "loading a checkpoint")
