"""Continuous batching: which sequences run this step, and with how many tokens.

Every step the batch is rebuilt. Running sequences come first (decodes before prefill
chunks, oldest first), then waiting ones are admitted in arrival order while the step's
token budget, the running-sequence limit, the KDA state slots and the KV blocks allow.
Long prompts are prefilled in chunks across steps.

The step mix says whether decodes and prefill chunks share a step. ``mixed`` (the
default, Sarathi's and vLLM V1's) puts both in every step: running sequences keep
producing a token each step while new prompts are prefilled in the budget left over,
which favours inter-token latency. ``prefill-first`` (vLLM V0's) runs a step of prefill
chunks only whenever a prompt is waiting or part-prefilled and can run, and decodes in
the steps between: new requests start sooner, running ones pause meanwhile.

When a running sequence needs a KV block and none is free, another is preempted: its
memory is released and it waits again, to recompute its tokens (prompt and output)
later. The preemption policy picks which: ``newest`` (the default, vLLM's), the most
recently admitted, which FCFS owes least; or ``cheapest``, the one with the fewest
tokens computed, which costs least to recompute. The scheduler owns policy only; memory
is tracked by the pools it is given.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from swarmfab.engine.cache import BlockPool, StateSlots
from swarmfab.engine.request import Request, RequestStatus
from swarmfab.errors import EngineError

__all__ = ["PREEMPTIONS", "STEP_MIXES", "ScheduledStep", "Scheduler", "SchedulerConfig"]

STEP_MIXES = ("mixed", "prefill-first")
PREEMPTIONS = ("newest", "cheapest")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 32              # running sequences at most
    max_num_batched_tokens: int = 256   # new tokens per step (the chunked-prefill budget)
    max_model_len: int = 4096           # prompt + output per request
    step_mix: str = "mixed"             # or "prefill-first" (see the module's docstring)
    preemption: str = "newest"          # or "cheapest" (see the module's docstring)

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise EngineError("max_num_seqs and max_num_batched_tokens must be at least 1")
        for name, allowed in (("step_mix", STEP_MIXES), ("preemption", PREEMPTIONS)):
            if getattr(self, name) not in allowed:
                raise EngineError(f"{name} must be one of {', '.join(allowed)}, "
                                  f"not {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True)
class ScheduledStep:
    """Sequences to run, decodes (one new token) first, and their new-token counts."""

    requests: tuple[Request, ...]
    num_new_tokens: tuple[int, ...]
    preempted: tuple[Request, ...]

    @property
    def num_decodes(self) -> int:
        return sum(1 for n in self.num_new_tokens if n == 1)


class Scheduler:
    """Decode-first FCFS scheduling with chunked prefill and preemption by recompute."""

    def __init__(self, config: SchedulerConfig, states: StateSlots, pool: BlockPool):
        self.config = config
        self.states = states
        self.pool = pool
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    @property
    def capacity_tokens(self) -> int:
        """The most tokens one request may hold: the model's length or the whole cache."""
        return min(self.config.max_model_len, self.pool.num_blocks * self.pool.block_size)

    def add(self, request: Request) -> None:
        needed = len(request.prompt_ids) + request.params.max_tokens
        if needed > self.capacity_tokens:
            raise EngineError(
                f"prompt ({len(request.prompt_ids)} tokens) + max_tokens "
                f"({request.params.max_tokens}) = {needed} exceeds the engine's limit of "
                f"{self.capacity_tokens} tokens per request; shorten the prompt or lower "
                "max_tokens")
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        if self.config.step_mix == "prefill-first":
            step = self._schedule(decodes=False)
            if step.requests or step.preempted:
                return step
        return self._schedule(decodes=True)

    def _schedule(self, decodes: bool) -> ScheduledStep:
        """One step's batch; without ``decodes``, prefill chunks only."""
        limit = self.config.max_num_batched_tokens
        chosen: dict[Request, int] = {}
        preempted: list[Request] = []
        for request in sorted(self.running, key=_decodes_first):
            budget = limit - sum(chosen.values())
            if budget == 0:
                break
            left = request.num_tokens - request.num_computed
            if request.status is not RequestStatus.RUNNING or (left == 1 and not decodes):
                continue  # preempted earlier in this loop, or a decode left for later
            count = min(left, budget)
            if self._reserve(request, count, preempted, chosen):
                chosen[request] = count
        if not preempted:
            self._admit(limit - sum(chosen.values()), chosen)
        order = sorted(chosen, key=lambda r: _decodes_by_slot(r, chosen[r]))
        return ScheduledStep(tuple(order), tuple(chosen[r] for r in order), tuple(preempted))

    def _reserve(self, request: Request, count: int, preempted: list[Request],
                 chosen: dict[Request, int]) -> bool:
        """Blocks for ``count`` more tokens, preempting sequences by the policy (and
        taking them out of this step); False if the request itself had to be preempted."""
        needed = self.pool.blocks_for(request.num_computed + count) - len(request.blocks)
        while needed > self.pool.free:
            victim = self._victim()
            self._preempt(victim)
            preempted.append(victim)
            chosen.pop(victim, None)
            if victim is request:
                return False
        request.blocks.extend(self.pool.allocate(max(needed, 0)))
        return True

    def _victim(self) -> Request:
        if self.config.preemption == "cheapest":  # the newest among equals
            return min(reversed(self.running), key=lambda r: r.num_computed)
        return self.running[-1]

    def _admit(self, budget: int, chosen: dict[Request, int]) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs \
                and self.states.free > 0:
            request = self.waiting[0]
            count = min(request.num_tokens, budget)
            needed = self.pool.blocks_for(count)
            if needed > self.pool.free:
                break
            self.waiting.popleft()
            request.state_slot = self.states.allocate()
            request.blocks = self.pool.allocate(needed)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            chosen[request] = count
            budget -= count

    def _preempt(self, request: Request) -> None:
        self._release(request)
        self.running.remove(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed = 0
        self.waiting.appendleft(request)

    def _release(self, request: Request) -> None:
        if request.state_slot is not None:
            self.states.release(request.state_slot)
            request.state_slot = None
        self.pool.release(request.blocks)
        request.blocks = []

    def finish(self, request: Request) -> None:
        """Take a finished (or aborted) request out and free its memory."""
        self._release(request)
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED


def _decodes_by_slot(request: Request, count: int) -> tuple[bool, int]:
    """The order a step's batch is handed to the model: decodes first, in state-slot
    order (slots in a run are one slice of the pool, no gather), then prefill chunks as
    they came (the sort is stable)."""
    if count != 1:
        return (True, 0)
    return (False, request.state_slot if request.state_slot is not None else 0)


def _decodes_first(request: Request) -> tuple[bool, float]:
    """The order running sequences draw on a step's token budget: decodes (one token
    each) before part-prefilled prompts, oldest first within each, so a long prompt's
    chunk never crowds out a stream's next token and the oldest are served first."""
    return (request.num_tokens - request.num_computed != 1, request.arrival)
