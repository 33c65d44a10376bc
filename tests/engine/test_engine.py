"""The engine end to end without HTTP: batching, chunked prefill, preemption, sampling."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmfab.backends.c import CBackend
from swarmfab.engine.engine import BIG_MODEL_BYTES, EngineConfig, LLMEngine
from swarmfab.engine.model import HybridModel
from swarmfab.engine.request import FinishReason, SamplingParams
from swarmfab.engine.slots import KernelSlots
from swarmfab.errors import EngineError
from swarmfab.workloads import design_space, get_workload

GREEDY = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
LENGTHS = (5, 23, 41, 2, 66, 9, 17, 30)


def _prompts(lengths: tuple[int, ...] = LENGTHS, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 512, (n,), generator=generator).tolist() for n in lengths]


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> HybridModel:
    return HybridModel.from_pretrained(tiny_model)


def _engine(model: HybridModel, **options: Any) -> LLMEngine:
    return LLMEngine(model, None, EngineConfig(**options))


def test_batched_greedy_output_equals_single_request_output(model: HybridModel) -> None:
    prompts = _prompts()
    # a small token budget forces chunked prefill and steps mixing decodes with prefill
    batched = _engine(model, max_num_batched_tokens=24).generate(prompts, GREEDY)
    single = [_engine(model).generate([p], GREEDY)[0] for p in prompts]
    assert batched == single
    # every prompt in the first step: prefill groups of unequal lengths, right-padded
    assert _engine(model, max_num_batched_tokens=512).generate(prompts, GREEDY) == single
    assert all(len(out) == GREEDY.max_tokens for out in batched)


def test_intra_op_threads_follow_the_model_size_unless_set(model: HybridModel) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert EngineConfig().intra_op_threads(model.weight_bytes) == max(1, cpus - 1)
    assert EngineConfig().intra_op_threads(BIG_MODEL_BYTES) == cpus
    assert EngineConfig(threads=3).intra_op_threads(model.weight_bytes) == 3
    with pytest.raises(EngineError, match="threads"):
        EngineConfig(threads=0)


def test_engine_greedy_tokens_equal_transformers_generate(
    model: HybridModel, hf_model: Any
) -> None:
    prompts = _prompts((7, 33, 12), seed=3)
    ours = _engine(model, max_num_batched_tokens=16).generate(prompts, GREEDY)
    for prompt, tokens in zip(prompts, ours, strict=True):
        theirs = hf_model.generate(torch.tensor([prompt]), max_new_tokens=10,
                                   min_new_tokens=10, do_sample=False)[0, len(prompt):]
        assert tokens == theirs.tolist()


def test_a_factory_c_kernel_in_the_kda_slots_gives_the_same_tokens(
    model: HybridModel, tmp_path: Path
) -> None:
    space = design_space("kda")
    candidate = space.instantiate(space.default(), threads=1)
    backend = CBackend()
    kernel = backend.load(backend.build(candidate, tmp_path), get_workload("kda"),
                          fill_outputs=False)
    calls: list[tuple[int, bool]] = []
    pools: set[int] = set()

    def counted(*args: Any, **kwargs: Any) -> Any:
        # T (1 for decode steps, the chunk for prefill), and whether the states were
        # updated in place where the engine keeps them
        calls.append((args[0].shape[1], kwargs["inplace_final_state"]))
        o, state = kernel(*args, **kwargs)
        assert state is kwargs["initial_state"]
        pools.add(state.data_ptr())
        return o, state

    slots = KernelSlots().with_kda(counted, label=f"c:{candidate.id[:12]}")
    champion = HybridModel(model.config, model.weights, slots)
    prompts = _prompts((19, 4, 50), seed=5)
    engine = _engine(champion, max_num_batched_tokens=20)
    assert engine.generate(prompts, GREEDY) == \
        _engine(model, max_num_batched_tokens=20).generate(prompts, GREEDY)
    assert champion.slots.labels["kda_decode"].startswith("c:")
    assert (1, True) in calls and max(calls)[0] > 1, "both KDA slots must have run the C kernel"
    assert all(in_place for _, in_place in calls)
    layers = engine.states.recurrent
    assert pools == {layers[i].data_ptr() for i in range(layers.shape[0])}


def test_a_kernel_with_fla_signature_alone_gets_the_pool_by_gather_and_scatter(
    model: HybridModel,
) -> None:
    reference = get_workload("kda").baselines()["torch-recurrent"]

    def fla_signature(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: Any = None,
                      initial_state: Any = None, output_final_state: bool = False) -> Any:
        return reference(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state)

    plain = HybridModel(model.config, model.weights,
                        KernelSlots().with_kda(fla_signature, label="fla-signature"))
    prompts = _prompts((9, 27), seed=6)
    assert _engine(plain, max_num_batched_tokens=16).generate(prompts, GREEDY) == \
        _engine(model, max_num_batched_tokens=16).generate(prompts, GREEDY)


def test_a_burst_never_exceeds_the_cache_budget_and_preempted_work_is_recomputed(
    model: HybridModel,
) -> None:
    prompts = _prompts((12, 9, 14, 7, 11, 13, 8, 10, 12, 6), seed=7)
    params = SamplingParams(max_tokens=14, temperature=0, ignore_eos=True)
    engine = _engine(model, num_kv_blocks=12, block_size=4, max_num_seqs=8,
                     max_num_batched_tokens=64)
    requests = [engine.add_request(p, params) for p in prompts]
    peak = 0
    while engine.has_work():
        engine.step()
        assert engine.pool.used <= engine.pool.num_blocks
        assert len(engine.scheduler.running) <= 8
        peak = max(peak, engine.pool.used)
    assert engine.stats.preemptions > 0, "the burst was meant to run out of KV blocks"
    assert peak == engine.pool.num_blocks
    assert engine.pool.used == 0 and engine.states.free == 8
    roomy = _engine(model).generate(prompts, params)
    assert [r.output_ids for r in requests] == roomy


def test_logprobs_agree_across_chunking_preemption_and_teacher_forcing(
    model: HybridModel,
) -> None:
    """Prompt log-probabilities are the same whether the prompt is prefilled in one step,
    in chunks, or again after a preemption (each token scored once); a generated token's
    equals its score when prompt + output are fed back as a prompt."""
    prompts = _prompts((12, 9, 14, 7, 11, 13, 8, 10, 12, 6), seed=7)
    params = SamplingParams(max_tokens=14, temperature=0, ignore_eos=True, logprobs=2,
                            prompt_logprobs=1)

    def run(**options: Any) -> tuple[list[Any], LLMEngine]:
        engine = _engine(model, **options)
        requests = [engine.add_request(p, params) for p in prompts]
        outputs: dict[str, list[Any]] = {r.id: [] for r in requests}
        while engine.has_work():
            for output in engine.step():
                outputs[output.request_id].append(output)
        return [outputs[r.id] for r in requests], engine

    whole, _ = run()
    squeezed, engine = run(num_kv_blocks=12, block_size=4, max_num_seqs=8,
                           max_num_batched_tokens=5)
    assert engine.stats.preemptions > 0
    for prompt, one, other in zip(prompts, whole, squeezed, strict=True):
        first = one[0].prompt_logprobs
        assert [e.token for e in first] == prompt[1:]
        assert all(o.prompt_logprobs is None for o in one[1:])
        again = other[0].prompt_logprobs
        assert [e.token for e in again] == prompt[1:]
        assert [e.logprob for e in again] == pytest.approx([e.logprob for e in first],
                                                           abs=1e-4)
        assert all(len(e.top) == 1 and e.top[0][1] >= e.logprob - 1e-6 for e in first)
    generated = [o.logprobs[0] for o in whole[0]]
    assert all(len(g.top) == 2 and g.top[0][0] == g.token for g in generated)  # greedy
    tokens = [g.token for g in generated]
    engine = _engine(model)
    fed = engine.add_request(prompts[0] + tokens, SamplingParams(
        max_tokens=1, temperature=0, prompt_logprobs=0))
    while engine.has_work():
        engine.step()
    scored = fed.prompt_logprobs[len(prompts[0]) - 1:]
    assert [e.logprob for e in scored] == pytest.approx([g.logprob for g in generated],
                                                        abs=1e-4)
    with pytest.raises(EngineError, match="logprobs must be between 0 and 20"):
        SamplingParams(logprobs=21)


def test_a_request_larger_than_the_cache_is_refused_up_front(model: HybridModel) -> None:
    engine = _engine(model, num_kv_blocks=4, block_size=4)
    with pytest.raises(EngineError, match=r"the engine allows 16 per request"):
        engine.add_request(list(range(3, 15)), SamplingParams(max_tokens=8))
    with pytest.raises(EngineError, match="empty"):
        engine.add_request([], SamplingParams())


def test_seeded_sampling_repeats_and_top_k_one_is_greedy(model: HybridModel) -> None:
    prompts = _prompts((6, 11), seed=9)
    seeded = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.9, seed=42,
                            ignore_eos=True)
    first = _engine(model).generate(prompts, seeded)
    assert _engine(model).generate(prompts, seeded) == first
    other = _engine(model).generate(prompts, SamplingParams(
        max_tokens=8, temperature=0.9, seed=43, ignore_eos=True))
    assert other != first
    top1 = SamplingParams(max_tokens=8, temperature=1.5, top_k=1, ignore_eos=True)
    assert _engine(model).generate(prompts, top1) == _engine(model).generate(
        prompts, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))


def test_stop_conditions(model: HybridModel, tiny_model: Path) -> None:
    from swarmfab.engine.tokenizer import Tokenizer

    tokenizer = Tokenizer(tiny_model)
    engine = LLMEngine(model, tokenizer)
    prompt = tokenizer.encode("kane tori suven")
    free = engine.add_request(prompt, SamplingParams(max_tokens=12, temperature=0,
                                                     ignore_eos=True))
    while engine.has_work():
        engine.step()
    text = free.text
    assert free.finish_reason is FinishReason.LENGTH and len(free.output_ids) == 12
    stop_at = text[3:5]
    stopped = engine.add_request(prompt, SamplingParams(max_tokens=12, temperature=0,
                                                        stop=(stop_at,), ignore_eos=True))
    eos = engine.add_request(prompt, SamplingParams(
        max_tokens=12, temperature=0, stop_token_ids=(free.output_ids[4],), min_tokens=2))
    while engine.has_work():
        engine.step()
    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.text == text[:text.find(stop_at)]
    assert eos.finish_reason is FinishReason.STOP
    assert eos.output_ids == free.output_ids[:free.output_ids.index(free.output_ids[4]) + 1]


def test_a_checkpoint_without_a_tokenizer_serves_token_ids(tiny_model: Path,
                                                           tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((tiny_model / name).read_bytes())
    engine = LLMEngine.from_pretrained(tmp_path)
    assert engine.tokenizer is None
    request = engine.add_request([5, 6, 7], GREEDY)
    while engine.has_work():
        engine.step()
    assert len(request.output_ids) == GREEDY.max_tokens and request.text == ""
