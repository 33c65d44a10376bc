"""The engine's weight matmuls: oneDNN with packed weights computes what F.linear does, in
every way the model calls it, and the model serves the same tokens either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from swarmfab.engine.engine import EngineConfig, LLMEngine
from swarmfab.engine.linear import PackedLinear, choose, onednn_available, onednn_packs
from swarmfab.engine.model import HybridModel
from swarmfab.engine.request import SamplingParams
from swarmfab.engine.slots import MOE_EXPERTS, KernelSlots
from swarmfab.errors import EngineError
from swarmfab.kernels import BF16_FLAGS, host_cpu_flags
from swarmfab.serving.recipe import Recipe

needs_onednn = pytest.mark.skipif(not onednn_available(),
                                  reason="this PyTorch has no oneDNN (torch.backends.mkldnn)")


@needs_onednn
def test_a_packed_weight_gives_f_linear_s_product_for_any_input() -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=generator)
    experts = torch.randn(4, 32, 64, generator=generator)
    wide = torch.randn(9, 100, generator=generator)
    linear = PackedLinear()
    inputs = [torch.randn(rows, 64, generator=generator) for rows in (0, 1, 8, 300)]
    inputs += [torch.randn(3, 5, 64, generator=generator),  # the prefill's [B, L, rank]
               wide[:, 10:74]]                              # a split's strided view
    for x in inputs:
        torch.testing.assert_close(linear(x, weight), F.linear(x, weight),
                                   rtol=1e-5, atol=1e-5)
    for expert in (2, 0, 2):  # slices of one tensor are weights of their own
        x = inputs[2]
        torch.testing.assert_close(linear(x, experts[expert]), F.linear(x, experts[expert]),
                                   rtol=1e-5, atol=1e-5)
    assert len(linear._packed) == 3  # one packed copy per weight, reused after


@needs_onednn
@pytest.mark.skipif(not host_cpu_flags() & BF16_FLAGS, reason="the CPU has no bfloat16")
def test_a_packed_bfloat16_weight_gives_f_linear_s_product() -> None:
    weight = torch.randn(64, 48).bfloat16()
    x = torch.randn(8, 48).bfloat16()
    torch.testing.assert_close(PackedLinear()(x, weight), F.linear(x, weight))


def test_each_choice_names_what_it_runs() -> None:
    weight = torch.randn(256, 128)
    assert choose("torch", weight) == (F.linear, "torch")
    linear, name = choose("auto", weight)
    assert name in ("torch", "onednn") and isinstance(linear, PackedLinear) == (
        name == "onednn")
    if onednn_available():
        assert isinstance(choose("onednn", weight)[0], PackedLinear)
    with pytest.raises(EngineError, match="linear must be one of auto, torch, onednn"):
        choose("blas", weight)
    with pytest.raises(EngineError, match="linear must be one of"):
        KernelSlots().choosing("linear", "blas")


@needs_onednn
def test_auto_keeps_the_weight_its_probe_packed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("swarmfab.kernels.gemm.CLEARLY_FASTER", float("inf"))  # oneDNN wins
    weight = torch.randn(64, 32)
    linear, name = choose("auto", weight)
    assert name == "onednn" and isinstance(linear, PackedLinear)
    assert len(linear._packed) == 1  # packed while probing
    x = torch.randn(5, 32)
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-5)
    assert len(linear._packed) == 1  # not packed again


@needs_onednn
def test_looped_experts_through_packed_weights_match_f_linear() -> None:
    generator = torch.Generator().manual_seed(3)
    gate, up = (torch.randn(4, 128, 256, generator=generator) * 256 ** -0.5 for _ in range(2))
    down = torch.randn(4, 256, 128, generator=generator) * 128 ** -0.5
    x = torch.randn(16, 256, generator=generator)
    experts = torch.stack([torch.randperm(4, generator=generator)[:2] for _ in range(16)])
    weights = torch.rand(16, 2, generator=generator)
    looped = MOE_EXPERTS["loop"][0]
    torch.testing.assert_close(looped(x, weights, experts, gate, up, down, PackedLinear()),
                               looped(x, weights, experts, gate, up, down, F.linear),
                               rtol=1e-5, atol=1e-5)


@needs_onednn
def test_the_engine_serves_the_same_tokens_with_either_linear(tiny_model: Path,
                                                               tmp_path: Path) -> None:
    prompts = [[5, 9, 33, 40], [7] * 12, list(range(100, 140))]
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    tokens: dict[str, Any] = {}
    for name in ("torch", "onednn"):
        slots = Recipe({"linear": name}).kernel_slots(tmp_path)
        assert slots.linear == name
        engine = LLMEngine(HybridModel.from_pretrained(tiny_model, slots), None,
                           EngineConfig(max_num_seqs=4))
        assert engine.model.linear_name == name
        tokens[name] = engine.generate(prompts, params)
    assert tokens["onednn"] == tokens["torch"]


@needs_onednn
def test_bfloat16_weights_are_packed_only_where_onednn_can_on_this_cpu() -> None:
    """oneDNN's bfloat16 packing needs AVX512-BW/VL/DQ or AVX-NE-CONVERT: elsewhere
    ``auto`` takes F.linear and ``onednn`` is refused by name (not a oneDNN traceback)."""
    weight, x = torch.randn(64, 48).bfloat16(), torch.randn(8, 48).bfloat16()
    linear, name = choose("auto", weight)
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=2e-2, atol=2e-2)
    if onednn_packs(torch.bfloat16):
        assert choose("onednn", weight)[1] == "onednn"
    else:
        assert name == "torch"
        with pytest.raises(EngineError, match="packs bfloat16 weights only"):
            choose("onednn", weight)
