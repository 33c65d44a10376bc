"""What ``swarmfab model`` studies: a user's model and the phases that matter to them.

A target is a Hugging Face model directory (``config.json`` and weights; random weights
made from a config are fine) or ``module.py:factory``, a function returning an
``nn.Module`` and its example inputs. A causal language model is studied in two
phases: prefill (one forward of ``tokens`` tokens at batch 1) and decode (greedy
``generate`` of ``new_tokens`` tokens from a 16-token prompt at batch ``batch``). A
factory's module has one phase, ``forward``, called on its example inputs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmfab.errors import GoalError

__all__ = ["Phase", "Target", "load_target", "phases_of"]

PROMPT_TOKENS = 16  # decode starts from a prompt this long


@dataclass(frozen=True)
class Phase:
    """One way the model is used: a name, a label with its sizes, and the call."""

    name: str
    label: str
    call: Callable[[torch.nn.Module], Any]  # runs the phase once on a model


@dataclass
class Target:
    """A loaded model, in eval mode, and what it is."""

    module: torch.nn.Module
    description: str
    causal_lm: bool
    example: tuple[Any, ...] = ()  # a factory's inputs
    vocab_size: int = 0


def load_target(spec: str) -> Target:
    """The model ``spec`` names: a directory with ``config.json``, else ``file.py:function``."""
    path = Path(spec)
    if path.is_dir():
        return _hugging_face(path)
    file, sep, function = spec.rpartition(":")
    if not sep or not file.endswith(".py"):
        raise GoalError(f"{spec!r}: name a Hugging Face model directory (with config.json) "
                        "or module.py:factory (a function returning the module and its "
                        "example inputs)")
    return _factory(Path(file), function)


def _hugging_face(directory: Path) -> Target:
    if not (directory / "config.json").is_file():
        raise GoalError(f"{directory} has no config.json: not a Hugging Face model directory")
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:  # pragma: no cover - a dev install has it
        raise GoalError("reading a Hugging Face model needs transformers "
                        "(pip install transformers)") from exc
    config = json.loads((directory / "config.json").read_text())
    try:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    except Exception as exc:  # a config transformers does not know, a torn file
        raise GoalError(f"transformers could not load {directory}: "
                        f"{type(exc).__name__}: {exc}") from exc
    model.eval()
    kind = config.get("model_type", "unknown")
    parameters = sum(p.numel() for p in model.parameters())
    return Target(model, f"{directory.name} ({kind}, {parameters / 1e6:.1f}M parameters)",
                  causal_lm=True, vocab_size=int(model.config.vocab_size))


def _factory(file: Path, function: str) -> Target:
    if not file.is_file():
        raise GoalError(f"{file} does not exist")
    name = file.stem  # importable by that name, as when run from its directory: a
    # problem file imports the target's own classes the same way
    known = sys.modules.get(name)
    if known is not None and Path(getattr(known, "__file__", "") or "").resolve() != \
            file.resolve():
        raise GoalError(f"{file}: its name {name!r} is already a module here "
                        f"({getattr(known, '__file__', 'built in')}); rename the file")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))  # its own imports, as when run there
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        made = getattr(module, function)()
    except Exception as exc:
        raise GoalError(f"{file}:{function} failed: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(made, tuple) and len(made) == 2
            and isinstance(made[0], torch.nn.Module)):
        raise GoalError(f"{file}:{function} must return (module, inputs): an nn.Module "
                        "and a tuple of its example inputs")
    model, inputs = made
    model.eval()
    inputs = tuple(inputs) if isinstance(inputs, Sequence) else (inputs,)
    return Target(model, f"{file.name}:{function} ({type(model).__name__})", causal_lm=False,
                  example=inputs)


def phases_of(target: Target, *, tokens: int, batch: int, new_tokens: int,
              seed: int = 0) -> list[Phase]:
    """The phases to profile and time: prefill and decode for a language model (each
    with fixed token ids drawn once), ``forward`` for a factory's module."""
    if not target.causal_lm:
        example = target.example

        def forward(model: torch.nn.Module) -> Any:
            with torch.no_grad():
                return model(*example)
        return [Phase("forward", "forward", forward)]
    generator = torch.Generator().manual_seed(seed)
    # ids past the specials (a random model's special ids are as good as any others)
    low = min(3, target.vocab_size - 1)
    prompt = torch.randint(low, target.vocab_size, (1, tokens), generator=generator)
    decode_prompt = torch.randint(low, target.vocab_size, (batch, PROMPT_TOKENS),
                                  generator=generator)

    def prefill(model: torch.nn.Module) -> Any:
        with torch.no_grad():
            return model(input_ids=prompt, use_cache=False).logits

    def decode(model: torch.nn.Module) -> Any:
        generate: Any = model.generate  # a transformers model's
        with torch.no_grad():
            return generate(decode_prompt, max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, do_sample=False,
                                  attention_mask=torch.ones_like(decode_prompt),
                                  pad_token_id=0)
    return [Phase("prefill", f"prefill T={tokens}", prefill),
            Phase("decode", f"decode b={batch}, {new_tokens} tokens", decode)]
