"""Scheduling policy alone (no model): budgets, decode-first order, limits, admission."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from swarmfab.engine.cache import BlockPool, StateSlots
from swarmfab.engine.config import load_config
from swarmfab.engine.request import Request, SamplingParams
from swarmfab.engine.scheduler import ScheduledStep, Scheduler, SchedulerConfig
from swarmfab.errors import EngineError

Build = Callable[..., Scheduler]


@pytest.fixture
def make(tiny_model: Path) -> Build:
    config = load_config(tiny_model)

    def build(slots: int = 4, blocks: int = 64, budget: int = 32,
              mix: str = "mixed", preemption: str = "newest") -> Scheduler:
        return Scheduler(SchedulerConfig(max_num_seqs=slots, max_num_batched_tokens=budget,
                                         step_mix=mix, preemption=preemption),
                         StateSlots(config, slots, torch.float32), BlockPool(blocks, 4))
    return build


def _request(length: int, max_tokens: int = 4) -> Request:
    return Request.create(list(range(3, 3 + length)), SamplingParams(max_tokens=max_tokens),
                          frozenset(), None)


def _advance(step: ScheduledStep) -> None:
    """What the engine does after the model ran: tokens computed, one sampled at the end."""
    for request, count in zip(step.requests, step.num_new_tokens, strict=True):
        request.num_computed += count
        if request.num_computed == request.num_tokens:
            request.output_ids.append(7)


def test_prompts_are_chunked_within_the_token_budget(make: Build) -> None:
    scheduler = make(budget=32)
    first, second = _request(40), _request(20)
    scheduler.add(first)
    scheduler.add(second)
    step = scheduler.schedule()
    assert step.requests == (first,) and step.num_new_tokens == (32,)
    _advance(step)
    step = scheduler.schedule()
    assert step.num_new_tokens == (8, 20) and step.requests == (first, second)
    _advance(step)
    step = scheduler.schedule()           # both decode now: one token each
    assert step.num_new_tokens == (1, 1) and step.num_decodes == 2


def test_decodes_come_first_then_prefill_chunks(make: Build) -> None:
    scheduler = make(budget=16)
    early = _request(4)
    scheduler.add(early)
    _advance(scheduler.schedule())        # early is decoding from now on
    late = _request(30)
    scheduler.add(late)
    step = scheduler.schedule()
    assert step.requests == (early, late) and step.num_new_tokens == (1, 15)


def test_prefill_first_runs_prefill_chunks_alone_while_prompts_can_start(
        make: Build) -> None:
    scheduler = make(slots=3, budget=16, mix="prefill-first")
    early = _request(4)
    scheduler.add(early)
    _advance(scheduler.schedule())        # early's prompt: it decodes from now on
    late, later = _request(20), _request(6)
    scheduler.add(late)
    scheduler.add(later)
    step = scheduler.schedule()           # prompts waiting: no decode in this step
    assert step.requests == (late,) and step.num_new_tokens == (16,)
    _advance(step)
    step = scheduler.schedule()           # late's last chunk, then later's whole prompt
    assert step.requests == (late, later) and step.num_new_tokens == (4, 6)
    _advance(step)
    step = scheduler.schedule()           # nothing left to prefill: everyone decodes
    assert step.num_decodes == 3 and set(step.requests) == {early, late, later}
    blocked = _request(4)
    scheduler.add(blocked)                # no free slot: it cannot start, decodes go on
    step = scheduler.schedule()
    assert step.num_decodes == 3 and blocked not in step.requests


def test_an_unknown_step_mix_is_refused() -> None:
    with pytest.raises(EngineError, match="step_mix must be one of mixed, prefill-first"):
        SchedulerConfig(step_mix="decode-only")


def test_decodes_hold_the_lowest_free_slots_and_run_in_slot_order(make: Build) -> None:
    scheduler = make(slots=4, budget=64)
    first, second, third = (_request(3, max_tokens=8) for _ in range(3))
    for request in (first, second, third):
        scheduler.add(request)
    _advance(scheduler.schedule())
    assert [r.state_slot for r in (first, second, third)] == [0, 1, 2]
    scheduler.finish(first)               # slots 0 then 1 are freed: 0 is taken next
    scheduler.finish(second)
    late = _request(2, max_tokens=8)
    scheduler.add(late)
    _advance(scheduler.schedule())
    assert late.state_slot == 0
    step = scheduler.schedule()           # both decode, in slot order
    assert step.requests == (late, third) and step.num_decodes == 2


def test_running_sequences_and_state_slots_are_limited(make: Build) -> None:
    scheduler = make(slots=2, budget=64)
    requests = [_request(3) for _ in range(4)]
    for request in requests:
        scheduler.add(request)
    step = scheduler.schedule()
    assert step.requests == tuple(requests[:2]) and len(scheduler.waiting) == 2
    assert scheduler.states.free == 0
    scheduler.finish(requests[0])
    _advance(step)
    assert scheduler.schedule().requests[-1] is requests[2]


@pytest.mark.parametrize(("policy", "victim"), [("newest", 2), ("cheapest", 1)])
def test_the_preemption_policy_picks_who_recomputes(make: Build, policy: str,
                                                   victim: int) -> None:
    scheduler = make(blocks=5, budget=64, preemption=policy)   # 20 tokens of KV in all
    requests = [_request(8), _request(3), _request(7)]          # 2 + 1 + 2 blocks
    for request in requests:
        scheduler.add(request)
    _advance(scheduler.schedule())
    step = scheduler.schedule()   # the first decode needs a third block: none is free
    assert step.preempted == (requests[victim],)
    assert requests[victim] not in step.requests and step.num_decodes == 2
    assert requests[victim].num_computed == 0 and scheduler.waiting[0] is requests[victim]


def test_admission_waits_for_kv_blocks(make: Build) -> None:
    scheduler = make(blocks=6, budget=64)   # 24 tokens of KV in all
    big, small = _request(20), _request(8)
    scheduler.add(big)
    scheduler.add(small)
    step = scheduler.schedule()
    assert step.requests == (big,)         # small needs 2 blocks; 1 is free
    assert scheduler.pool.used == 5 and list(scheduler.waiting) == [small]
