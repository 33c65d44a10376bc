"""Two models for `swarmfab model`, random weights made here from public configs, scaled
to run on a few cores:

- ``kimi-linear``: Kimi Linear's hybrid layout (transformers' ``kimi_linear``): 4
  layers, 3 of them KDA with heads of K = V = 128 as every Kimi Linear head has, one
  MLA attention layer, a mixture of 4 experts;
- ``dense``: a Llama-style dense decoder (grouped-query attention, SwiGLU MLP,
  RMSNorm): 4 layers, hidden 512.

    python examples/models/make.py [DIR]      # default: examples/models
    swarmfab model examples/models/kimi-linear --budget 15m
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

KIMI_LINEAR = {
    "model_type": "kimi_linear", "vocab_size": 2048, "hidden_size": 512,
    "intermediate_size": 1024, "moe_intermediate_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 128,
    "qk_rope_head_dim": 0, "qk_nope_head_dim": 128, "v_head_dim": 128, "num_experts": 4,
    "num_experts_per_tok": 2, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 128,
                           "num_heads": 4, "short_conv_kernel_size": 4},
}
DENSE = {
    "vocab_size": 2048, "hidden_size": 512, "intermediate_size": 1408,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}


def make(directory: Path) -> list[Path]:
    torch.manual_seed(0)
    kimi = dict(KIMI_LINEAR)
    config = AutoConfig.for_model(kimi.pop("model_type"), **kimi)
    written = []
    for name, model in (("kimi-linear", AutoModelForCausalLM.from_config(config)),
                        ("dense", AutoModelForCausalLM.from_config(LlamaConfig(**DENSE)))):
        target = directory / name
        model.save_pretrained(target)
        written.append(target)
    return written


if __name__ == "__main__":
    here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for path in make(here):
        print(f"wrote {path}")
