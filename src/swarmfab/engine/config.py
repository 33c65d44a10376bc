"""The shape of a Kimi Linear checkpoint, read from its ``config.json``.

Moonshot's checkpoints and Hugging Face's ``save_pretrained`` spell some fields
differently (``num_experts`` / ``num_local_experts``, ``linear_attn_config`` /
``layer_types``...); this module accepts both and refuses a config it cannot serve with
one message naming the field, instead of failing deep inside a forward pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmfab.errors import EngineError

__all__ = ["ModelConfig", "load_config"]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """What the engine needs to know about a hybrid KDA / MLA decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layer_types: tuple[str, ...]          # "linear_attention" (KDA) or "full_attention" (MLA)
    mlp_types: tuple[str, ...]            # "dense" or "sparse" (MoE)
    rms_norm_eps: float
    # KDA
    linear_heads: int
    linear_head_dim: int
    conv_kernel: int
    # MLA
    attention_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None
    # MoE
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_experts: int
    expert_groups: int
    topk_groups: int
    renormalize: bool
    routed_scaling: float
    eos_token_ids: tuple[int, ...]
    max_model_len: int

    @property
    def kda_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.layer_types) if kind == "linear_attention"]

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.layer_types) if kind == "full_attention"]

    @property
    def latent_dim(self) -> int:
        """Floats cached per token per attention layer: MLA keeps the compressed latent."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def _first(raw: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if raw.get(name) is not None:
            return raw[name]
    return default


def _layer_types(raw: dict[str, Any], layers: int) -> tuple[str, ...]:
    if raw.get("layer_types"):
        return tuple(raw["layer_types"])
    linear = raw.get("linear_attn_config") or {}
    if "kda_layers" in linear and "full_attn_layers" in linear:
        kinds = ["?"] * layers
        for index in linear["full_attn_layers"]:  # 1-based in Moonshot's configs
            kinds[index - 1] = "full_attention"
        for index in linear["kda_layers"]:
            kinds[index - 1] = "linear_attention"
        return tuple(kinds)
    return tuple("full_attention" if i and i % 4 == 0 else "linear_attention"
                 for i in range(layers))


def _mlp_types(raw: dict[str, Any], layers: int) -> tuple[str, ...]:
    if raw.get("mlp_layer_types"):
        return tuple(raw["mlp_layer_types"])
    dense_first = int(raw.get("first_k_dense_replace", 1))
    return tuple("dense" if i < dense_first else "sparse" for i in range(layers))


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from a parsed ``config.json``; EngineError if unservable."""
    if raw.get("model_type") != "kimi_linear":
        raise EngineError(f"config.json: model_type is {raw.get('model_type')!r}; this engine "
                          "serves kimi_linear (KimiLinearForCausalLM) checkpoints")
    linear = raw.get("linear_attn_config") or {}
    layers = int(raw["num_hidden_layers"])
    if raw.get("hidden_act", "silu") != "silu":
        raise EngineError(f"config.json: hidden_act {raw['hidden_act']!r}; only silu is supported")
    eos = raw.get("eos_token_id")
    config = ModelConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        layer_types=_layer_types(raw, layers),
        mlp_types=_mlp_types(raw, layers),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        linear_heads=int(_first(raw, "linear_num_heads", default=linear.get("num_heads", 32))),
        linear_head_dim=int(_first(raw, "linear_head_dim", default=linear.get("head_dim", 128))),
        conv_kernel=int(_first(raw, "linear_conv_kernel_dim",
                               default=linear.get("short_conv_kernel_size", 4))),
        attention_heads=int(raw["num_attention_heads"]),
        kv_lora_rank=int(raw.get("kv_lora_rank", 512)),
        qk_nope_head_dim=int(raw.get("qk_nope_head_dim", 128)),
        qk_rope_head_dim=int(raw.get("qk_rope_head_dim", 64)),
        v_head_dim=int(raw.get("v_head_dim", 128)),
        q_lora_rank=raw.get("q_lora_rank"),
        num_experts=int(_first(raw, "num_experts", "num_local_experts", default=256)),
        experts_per_token=int(_first(raw, "num_experts_per_token", "num_experts_per_tok",
                                     default=8)),
        moe_intermediate_size=int(raw.get("moe_intermediate_size", 1024)),
        shared_experts=int(_first(raw, "num_shared_experts", "n_shared_experts", default=1)),
        expert_groups=int(_first(raw, "num_expert_group", "n_group", default=1)),
        topk_groups=int(_first(raw, "topk_group", default=1)),
        renormalize=bool(_first(raw, "moe_renormalize", "norm_topk_prob", default=True)),
        routed_scaling=float(raw.get("routed_scaling_factor", 1.0)),
        eos_token_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
        max_model_len=int(_first(raw, "model_max_length", "max_position_embeddings",
                                 default=1 << 20)),
    )
    _check(config)
    return config


def _check(config: ModelConfig) -> None:
    unknown = sorted(set(config.layer_types) - {"linear_attention", "full_attention"})
    if unknown:
        raise EngineError(f"config.json: layer types {unknown} unknown; every layer must be "
                          "linear_attention (KDA) or full_attention (MLA)")
    if config.q_lora_rank is not None:
        raise EngineError("config.json: q_lora_rank is set; this engine supports only a "
                          "plain q_proj (q_lora_rank null), as Kimi Linear uses")


def load_config(model_dir: Path) -> ModelConfig:
    """Read and check ``MODEL_DIR/config.json``."""
    path = model_dir / "config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise EngineError(f"{model_dir} has no config.json; give a Hugging Face checkpoint "
                          "directory (config.json + *.safetensors + tokenizer.json)") from None
    except json.JSONDecodeError as exc:
        raise EngineError(f"{path} is not valid JSON: {exc}") from exc
    try:
        return parse_config(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineError(f"{path}: missing or invalid field {exc}") from exc
