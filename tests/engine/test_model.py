"""The engine's model against transformers' KimiLinearForCausalLM on the same checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from swarmfab.engine.cache import BlockPool, KvCache, StateSlots
from swarmfab.engine.config import load_config
from swarmfab.engine.model import HybridModel, StepBatch, prefill_groups
from swarmfab.errors import EngineError


def _chunk(ids: torch.Tensor, start: int, stop: int, slot: int, rows: torch.Tensor
           ) -> StepBatch:
    """A batch of one sequence computing positions [start, stop), logits for each."""
    length = stop - start
    return StepBatch(ids[start:stop], (length,), int(length == 1), (slot,), rows[start:stop],
                     rows[None, :stop], (stop,), torch.arange(length))


def test_chunked_prefill_and_decode_match_transformers_logits(
    tiny_model: Path, hf_model: Any
) -> None:
    model = HybridModel.from_pretrained(tiny_model)
    ids = torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = hf_model(ids[None]).logits[0]
    states = StateSlots(model.config, 2, torch.float32)
    pool = BlockPool(4, 16)
    kv = KvCache(model.config, pool, torch.float32)
    slot = states.allocate()
    blocks = pool.allocate(3)
    rows = torch.tensor([blocks[p // 16] * 16 + p % 16 for p in range(40)])
    # chunks of uneven sizes cross block boundaries; the last two tokens are decodes
    logits = torch.cat([model.forward(_chunk(ids, a, b, slot, rows), states, kv)
                        for a, b in ((0, 13), (13, 30), (30, 38), (38, 39), (39, 40))])
    assert (logits - reference).abs().max() < 1e-4 * reference.abs().max()
    assert torch.equal(logits.argmax(-1), reference.argmax(-1))


def test_the_tiny_config_is_read_from_moonshot_field_names(tiny_model: Path) -> None:
    config = load_config(tiny_model)
    assert config.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert config.mlp_types == ("dense", "sparse", "sparse", "sparse")
    assert (config.num_experts, config.experts_per_token, config.eos_token_ids) == (4, 2, (2,))


def test_a_directory_without_a_checkpoint_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"no config\.json"):
        HybridModel.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(EngineError, match="kimi_linear"):
        HybridModel.from_pretrained(tmp_path)


def test_prefill_chunks_group_while_padding_stays_within_twice_the_real_tokens() -> None:
    lens = (1, 1, 64, 2, 3)                    # two decodes, then chunks of 64, 2 and 3
    rows = torch.zeros(sum(lens), dtype=torch.long)
    batch = StepBatch(torch.zeros(sum(lens), dtype=torch.long), lens, 2, (7, 6, 5, 4, 3),
                      rows, rows[None], lens, torch.arange(1))
    groups = prefill_groups(batch)
    # 64 and 3 pad to 128 <= 2 x 67; adding 2 would pad to 192 > 2 x 69
    assert [g.seqs.tolist() for g in groups] == [[2, 4], [3]]
    first = groups[0]
    assert first.rows.shape == (2, 64) and first.lengths.tolist() == [64, 3]
    assert first.rows[1, :3].tolist() == [68, 69, 70] and first.slots.tolist() == [5, 3]
    assert not first.valid[1, 3:].any()
    x = torch.arange(float(sum(lens)))[:, None]
    padded = first.gather(x)
    assert padded[1, 3:].eq(0).all() and padded[0, :, 0].tolist() == list(range(2, 66))
    out = torch.full_like(x, -1.0)
    first.scatter(out, padded)
    assert out[2:66, 0].tolist() == list(range(2, 66)) and out[66:68].eq(-1).all()
    assert out[68:71, 0].tolist() == [68, 69, 70]
    assert first.first is None and groups[1].first == 66     # a lone chunk is a view


def test_adjacent_chunks_of_one_length_are_gathered_as_a_view_of_the_packed_rows() -> None:
    lens = (1, 4, 4, 4)                          # a decode, then three chunks of 4
    rows = torch.zeros(sum(lens), dtype=torch.long)
    batch = StepBatch(torch.zeros(sum(lens), dtype=torch.long), lens, 1, (0, 1, 2, 3),
                      rows, rows[None], lens, torch.arange(1))
    (group,) = prefill_groups(batch)
    assert group.first == 1 and group.seqs.tolist() == [1, 2, 3]
    x = torch.arange(float(sum(lens) * 2)).view(-1, 2)
    padded = group.gather(x)
    assert padded.shape == (3, 4, 2) and padded.data_ptr() == x[1].data_ptr()
    assert torch.equal(padded, x[group.rows])        # what the padded path would gather
    out = torch.full_like(x, -1.0)
    group.scatter(out, padded * 2)
    assert torch.equal(out[1:], x[1:] * 2) and out[0].eq(-1).all()


@pytest.mark.parametrize("choice", ["auto", "dense", "loop"])
@pytest.mark.parametrize(("tokens", "hidden", "inner"), [(8, 32, 16), (64, 256, 128)])
def test_routed_experts_match_each_token_through_its_own_experts(
        tokens: int, hidden: int, inner: int, choice: str) -> None:
    # (8, 32, 16) is under DENSE_EXPERT_MACS, so "auto" runs every expert densely; the
    # other runs each expert on its own tokens: every way must be the per-token sum
    from swarmfab.engine.slots import DENSE_EXPERT_MACS, MOE_EXPERTS, reference_mlp

    experts_n, choices = 4, 2
    generator = torch.Generator().manual_seed(tokens)
    gate, up = (torch.randn(experts_n, inner, hidden, generator=generator) * hidden ** -0.5
                for _ in range(2))
    down = torch.randn(experts_n, hidden, inner, generator=generator) * inner ** -0.5
    x = torch.randn(tokens, hidden, generator=generator)
    experts = torch.stack([torch.randperm(experts_n, generator=generator)[:choices]
                           for _ in range(tokens)])
    weights = torch.rand(tokens, choices, generator=generator)
    dense = tokens * gate.numel() * 3 <= DENSE_EXPERT_MACS
    assert dense == (tokens == 8)
    expected = torch.stack([
        sum(weights[t, c] * reference_mlp(x[t:t + 1], gate[e], up[e], down[e])[0]
            for c, e in enumerate(experts[t].tolist()))
        for t in range(tokens)])
    out = MOE_EXPERTS[choice][0](x, weights, experts, gate, up, down)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("choice", ["absorbed", "expanded"])
@pytest.mark.parametrize("rope", [0, 8])
def test_mla_decode_equals_attention_over_expanded_keys_and_values(rope: int,
                                                                   choice: str) -> None:
    from swarmfab.engine.slots import MLA_DECODE, reference_attention

    seqs, length, heads, nope, value, rank = 3, 11, 4, 16, 12, 20
    generator = torch.Generator().manual_seed(rope)
    q = torch.randn(seqs, heads, nope + rope, generator=generator)
    latents = torch.randn(seqs, length, rank + rope, generator=generator)
    kv_b = torch.randn(heads * (nope + value), rank, generator=generator) * rank ** -0.5
    lens = torch.tensor([11, 4, 7])
    mask = torch.arange(length) < lens[:, None]
    expanded = (latents[..., :rank] @ kv_b.t()).view(seqs, length, heads, nope + value)
    keys = torch.cat([expanded[..., :nope],
                      latents[:, :, None, rank:].expand(-1, -1, heads, -1)], dim=-1)
    values = expanded[..., nope:]
    expected = reference_attention(q[:, :, None], keys.transpose(1, 2),
                                   values.transpose(1, 2), mask[:, None, None, :], 0.3)
    out = MLA_DECODE[choice][0](q, latents, mask, kv_b, 0.3)
    torch.testing.assert_close(out, expected[:, :, 0], rtol=1e-4, atol=1e-5)
