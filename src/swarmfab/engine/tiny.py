"""Random-weight checkpoints, made offline (tests, benchmarks, demos).

Kimi Linear in two sizes: ``tiny`` (4 layers, hidden 128, 1.3M parameters; Python
overhead dominates its steps) and ``small`` (12 layers, hidden 768, 8 experts, 153M
parameters; the matmuls and the delta rule dominate, so kernels matter). And a
Llama-style dense decoder (grouped-query attention, SwiGLU, RMSNorm), the family other
engines serve (vLLM on CPU refuses Kimi Linear): ``llama-tiny`` (2 layers, hidden 128, 2
heads of 64)
and ``llama-small`` (8 layers, hidden 512, 27M parameters). The weights come from
``transformers``' ``AutoModelForCausalLM.from_config`` with a fixed seed, written by
``save_pretrained`` (Moonshot's tensor names). The tokenizer is a byte-level BPE
(``tokenizers``) trained here on a generated word list to exactly the model's vocabulary:
``<pad>`` 0, ``<s>`` 1, ``</s>`` 2 (end of sequence), the 256 bytes, then merges, so every
id the model can emit decodes to text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from swarmfab.errors import EngineError

__all__ = ["CHECKPOINTS", "SMALL_CONFIG", "TINY_CONFIG", "make_checkpoint",
           "make_tiny_checkpoint"]

TINY_CONFIG: dict[str, Any] = {
    "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
    "moe_intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "kv_lora_rank": 32, "qk_rope_head_dim": 0,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "num_experts": 4, "num_experts_per_tok": 2,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 32,
                           "num_heads": 4, "short_conv_kernel_size": 4},
}
SMALL_CONFIG: dict[str, Any] = {
    "vocab_size": 2048, "hidden_size": 768, "intermediate_size": 2048,
    "moe_intermediate_size": 512, "num_hidden_layers": 12, "num_attention_heads": 12,
    "num_key_value_heads": 12, "kv_lora_rank": 256, "qk_rope_head_dim": 0,
    "qk_nope_head_dim": 64, "v_head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11],
                           "full_attn_layers": [4, 8, 12], "head_dim": 64, "num_heads": 12,
                           "short_conv_kernel_size": 4},
}
_LLAMA = {"num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2, "model_type": "llama"}
# heads of 64: vLLM's CPU attention takes no narrower ones
LLAMA_TINY_CONFIG: dict[str, Any] = {**_LLAMA, "vocab_size": 512, "hidden_size": 128,
                                     "intermediate_size": 352, "num_hidden_layers": 2,
                                     "num_attention_heads": 2, "num_key_value_heads": 1}
LLAMA_SMALL_CONFIG: dict[str, Any] = {**_LLAMA, "vocab_size": 2048, "hidden_size": 512,
                                      "intermediate_size": 1408, "num_hidden_layers": 8}
CHECKPOINTS = {"tiny": TINY_CONFIG, "small": SMALL_CONFIG, "llama-tiny": LLAMA_TINY_CONFIG,
               "llama-small": LLAMA_SMALL_CONFIG}
_SPECIALS = ["<pad>", "<s>", "</s>"]


def _corpus(seed: int, vocab_size: int) -> list[str]:
    """Pseudo-words over a small alphabet: enough repeated pairs for every merge."""
    rng = random.Random(seed)
    syllables = ["ka", "ne", "ri", "to", "su", "mo", "la", "di", "ven", "kor", "th", "an"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
             for _ in range(400 if vocab_size <= 512 else 3 * vocab_size // 2)]
    return [" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000)]


def _tokenizer(vocab_size: int, seed: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(_corpus(seed, vocab_size), trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise EngineError(f"tiny tokenizer has {tokenizer.get_vocab_size()} entries, "
                          f"wanted {vocab_size}")
    return tokenizer


def make_tiny_checkpoint(directory: Path, seed: int = 0) -> Path:
    """The tiny checkpoint in ``directory`` (see :func:`make_checkpoint`)."""
    return make_checkpoint(directory, "tiny", seed)


def make_checkpoint(directory: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write config.json, model.safetensors, tokenizer.json and tokenizer_config.json
    (written last: its presence says the checkpoint is whole)."""
    if size not in CHECKPOINTS:
        raise EngineError(f"no checkpoint size {size!r}; choose from {sorted(CHECKPOINTS)}")
    config = dict(CHECKPOINTS[size])
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, KimiLinearConfig
    except ImportError as exc:
        raise EngineError("making the tiny checkpoint needs transformers>=5.19: "
                          "pip install 'swarmfab[engine]'") from exc
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    family = config.pop("model_type", None)
    made = AutoConfig.for_model(family, **config) if family else KimiLinearConfig(**config)
    model = AutoModelForCausalLM.from_config(made).eval()
    model.save_pretrained(str(directory))
    tokenizer = _tokenizer(int(config["vocab_size"]), seed)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
    }, indent=2))
    return directory


if __name__ == "__main__":  # python -m swarmfab.engine.tiny DIR [tiny|small]
    import sys

    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m swarmfab.engine.tiny DIR [tiny|small]")
    print(make_checkpoint(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) == 3 else "tiny"))
