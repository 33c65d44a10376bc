"""The engine loop: schedule, run the model once, sample, stream (nano-vllm's shape).

``LLMEngine`` is single-threaded and synchronous; :mod:`async_engine` runs it on a thread
for the HTTP server. Memory is sized from a byte budget: the KV pool gets
``kv_cache_bytes`` and one KDA state slot exists per allowed running sequence.

Threads: a step's operators use ``threads`` intra-op threads (torch's, process-wide). By
default a model whose weights outgrow the caches (``BIG_MODEL_BYTES``) gets every CPU this
process may use: its steps are matmuls bound by memory bandwidth, and every core adds
some. A smaller model gets one fewer, at least one: its steps are short operator calls,
and an intra-op worker spinning on the last core would delay the front end (the HTTP
server's event loop, or a client in the same process), hence every streamed token.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swarmfab.engine.cache import BlockPool, KvCache, StateSlots
from swarmfab.engine.model import HybridModel, StepBatch
from swarmfab.engine.request import (
    FinishReason,
    Logprob,
    Request,
    RequestOutput,
    SamplingParams,
)
from swarmfab.engine.sampling import sample
from swarmfab.engine.scheduler import ScheduledStep, Scheduler, SchedulerConfig
from swarmfab.engine.slots import KernelSlots
from swarmfab.engine.tokenizer import Tokenizer
from swarmfab.errors import EngineError

__all__ = ["BIG_MODEL_BYTES", "DTYPES", "EngineConfig", "EngineStats", "LLMEngine"]

BIG_MODEL_BYTES = 64 << 20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The serving knobs (see docs/architecture.md, "Inference engine")."""

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 256
    block_size: int = 16
    kv_cache_bytes: int = 64 << 20
    num_kv_blocks: int | None = None      # overrides kv_cache_bytes when set
    max_model_len: int = 4096
    threads: int | None = None            # intra-op threads; None: by model size
    step_mix: str = "mixed"               # or "prefill-first" (see engine.scheduler)
    preemption: str = "newest"            # or "cheapest" (see engine.scheduler)
    dtype: str = "float32"                # weights and activations; or "bfloat16" (KDA
    #                                       states stay float32)

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise EngineError(f"threads must be at least 1, got {self.threads}")
        self.scheduler()  # checks the scheduling knobs now, not at the first step
        if self.dtype not in DTYPES:
            raise EngineError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")

    def intra_op_threads(self, weight_bytes: int) -> int:
        if self.threads:
            return self.threads
        cpus = len(os.sched_getaffinity(0))
        return cpus if weight_bytes >= BIG_MODEL_BYTES else max(1, cpus - 1)

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(self.max_num_seqs, self.max_num_batched_tokens,
                               self.max_model_len, self.step_mix, self.preemption)


@dataclass(slots=True)
class EngineStats:
    """Counters and gauges for /metrics; tokens/s over the last ``window_s`` seconds."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    aborted: int = 0
    preemptions: int = 0
    steps: int = 0
    window_s: float = 10.0
    recent: deque[tuple[float, int]] = field(default_factory=deque)

    def record_tokens(self, count: int) -> None:
        now = time.monotonic()
        self.generation_tokens += count
        self.recent.append((now, count))
        while self.recent and self.recent[0][0] < now - self.window_s:
            self.recent.popleft()

    def tokens_per_second(self) -> float:
        now = time.monotonic()
        recent = list(self.recent)  # a snapshot: the engine thread appends meanwhile
        return sum(c for t, c in recent if t >= now - self.window_s) / self.window_s


class LLMEngine:
    """Requests in, :class:`RequestOutput` per step out."""

    def __init__(self, model: HybridModel, tokenizer: Tokenizer | None,
                 config: EngineConfig | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config = config or EngineConfig()
        blocks = config.num_kv_blocks or max(1, config.kv_cache_bytes // (
            config.block_size * KvCache.bytes_per_token(model.config, model.dtype)))
        try:
            self.pool = BlockPool(blocks, config.block_size)
            self.kv = KvCache(model.config, self.pool, model.dtype)
        except (MemoryError, RuntimeError) as exc:  # torch's CPU allocator: RuntimeError
            if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
                raise
            raise EngineError(
                f"the KV cache of {blocks} blocks of {config.block_size} tokens "
                f"({config.kv_cache_bytes >> 20} MiB asked) does not fit in this host's "
                f"memory ({type(exc).__name__}); give it less (kv_cache_mb)") from None
        self.states = StateSlots(model.config, config.max_num_seqs, model.dtype)
        self.scheduler = Scheduler(config.scheduler(), self.states, self.pool)
        self.eos_ids = frozenset(model.config.eos_token_ids)
        self.stats = EngineStats()
        self.use_threads()

    def use_threads(self) -> None:
        """Set torch's intra-op threads to the engine's (again, on the thread that steps)."""
        torch.set_num_threads(self.config.intra_op_threads(self.model.weight_bytes))

    @classmethod
    def from_pretrained(cls, model_dir: Path, config: EngineConfig | None = None,
                        slots: KernelSlots | None = None) -> LLMEngine:
        """Without ``tokenizer.json`` the engine still serves prompts given as token ids."""
        tokenizer = Tokenizer(model_dir) if (model_dir / "tokenizer.json").exists() else None
        config = config or EngineConfig()
        return cls(HybridModel.from_pretrained(model_dir, slots, DTYPES[config.dtype]),
                   tokenizer, config)

    # -- requests ----------------------------------------------------------------------
    def make_request(self, prompt_ids: list[int], params: SamplingParams,
                     request_id: str | None = None) -> Request:
        """A checked request, not yet queued (safe to call from another thread)."""
        vocab = self.model.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise EngineError(f"prompt token ids must lie in [0, {vocab})")
        request = Request.create(prompt_ids, params, self.eos_ids, self.tokenizer, request_id)
        needed = len(prompt_ids) + params.max_tokens
        if needed > self.scheduler.capacity_tokens:
            raise EngineError(
                f"this request needs {needed} tokens (prompt {len(prompt_ids)} + max_tokens "
                f"{params.max_tokens}); the engine allows {self.scheduler.capacity_tokens} "
                "per request. Shorten the prompt or lower max_tokens")
        return request

    def add(self, request: Request) -> None:
        self.scheduler.add(request)

    def add_request(self, prompt_ids: list[int], params: SamplingParams,
                    request_id: str | None = None) -> Request:
        request = self.make_request(prompt_ids, params, request_id)
        self.add(request)
        return request

    def abort(self, request: Request) -> RequestOutput | None:
        if request.finish_reason is not None:
            return None
        request.finish_reason = FinishReason.ABORT
        self.scheduler.finish(request)
        self.stats.aborted += 1
        return request.take_output(())

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- the loop ----------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        scheduled = self.scheduler.schedule()
        self.stats.preemptions += len(scheduled.preempted)
        if not scheduled.requests:
            if self.scheduler.running or self.scheduler.waiting:
                raise EngineError("the scheduler can place no request: the KV cache or "
                                  "state slots are too small for any waiting prompt")
            return []
        batch, plan = self._batch(scheduled)
        logits = self.model.forward(batch, self.states, self.kv)
        for request, count in zip(scheduled.requests, scheduled.num_new_tokens, strict=True):
            prompt = len(request.prompt_ids)
            self.stats.prompt_tokens += max(0, min(request.num_computed + count, prompt)
                                            - request.num_computed)
            request.num_computed += count
        self.stats.steps += 1
        sampled = plan.sampled
        tokens = sample(logits[plan.sample_at] if plan.prompt_rows else logits, sampled)
        self.stats.record_tokens(len(tokens))
        chosen = plan.logprobs(logits, tokens)
        outputs = []
        for request, token, logprob in zip(sampled, tokens, chosen, strict=True):
            request.append(token, self.config.max_model_len)
            outputs.append(request.take_output((token,), logprob))
            if request.finish_reason is not None:
                self.scheduler.finish(request)
                self.stats.finished += 1
        return outputs

    def _batch(self, step: ScheduledStep) -> tuple[StepBatch, _LogitPlan]:
        size = self.pool.block_size
        ids: list[int] = []
        kv_rows: list[int] = []
        plan = _LogitPlan()
        for request, count in zip(step.requests, step.num_new_tokens, strict=True):
            first = request.num_computed
            for position in range(first, first + count):
                ids.append(request.token(position))
                kv_rows.append(request.blocks[position // size] * size + position % size)
            if request.params.prompt_logprobs is not None:
                plan.add_prompt(request, len(ids) - count, first, count)
            if first + count == request.num_tokens:
                plan.add_sample(request, len(ids) - 1)
        lens = [r.num_computed + n for r, n in zip(step.requests, step.num_new_tokens,
                                                     strict=True)]
        width = max(lens)
        table = torch.zeros(len(lens), -(-width // size), dtype=torch.long)
        for row, request in enumerate(step.requests):
            table[row, :len(request.blocks)] = torch.tensor(request.blocks[:table.shape[1]])
        positions = torch.arange(width)
        context_rows = table[:, positions // size] * size + positions % size
        batch = StepBatch(
            token_ids=torch.tensor(ids), query_lens=step.num_new_tokens,
            num_decodes=step.num_decodes,
            state_slots=tuple(r.state_slot for r in step.requests),  # type: ignore[misc]
            kv_rows=torch.tensor(kv_rows), context_rows=context_rows,
            context_lens=tuple(lens), sample_rows=torch.tensor(plan.rows, dtype=torch.long),
        )
        return batch, plan

    def generate(self, prompts: list[list[int]], params: SamplingParams
                 ) -> list[list[int]]:
        """Offline: run every prompt to completion; the generated token ids of each."""
        requests = [self.add_request(p, params) for p in prompts]
        while self.has_work():
            self.step()
        return [r.output_ids for r in requests]


@dataclass(slots=True)
class _LogitPlan:
    """Which rows of a step need logits: one per sampling request, and the rows of
    prompts whose log-probabilities were asked for. ``rows`` index the step's tokens;
    the model returns logits in that order."""

    rows: list[int] = field(default_factory=list)
    sampled: list[Request] = field(default_factory=list)
    sample_at: list[int] = field(default_factory=list)      # into the logits
    prompt_rows: list[tuple[Request, int, int]] = field(default_factory=list)  # at, target

    def add_sample(self, request: Request, row: int) -> None:
        self.sampled.append(request)
        self.sample_at.append(len(self.rows))
        self.rows.append(row)

    def add_prompt(self, request: Request, row: int, first: int, count: int) -> None:
        """The logits at prompt position p score prompt token p + 1; tokens recorded
        before (by a step this request repeats after preemption) are skipped."""
        prompt, recorded = request.prompt_ids, len(request.prompt_logprobs)
        for position in range(max(first, recorded), min(first + count, len(prompt) - 1)):
            self.prompt_rows.append((request, len(self.rows), prompt[position + 1]))
            self.rows.append(row + position - first)

    def logprobs(self, logits: torch.Tensor, tokens: list[int]
                 ) -> list[tuple[Logprob, ...]]:
        """Each sampled token's log-probability where its request asked (else ()); the
        prompt rows' go to their requests' ``prompt_logprobs``."""
        wanted = [r.params.logprobs is not None for r in self.sampled]
        if not any(wanted) and not self.prompt_rows:
            return [()] * len(tokens)
        scores = torch.log_softmax(logits.float(), dim=-1)
        for request, at, target in self.prompt_rows:
            request.prompt_logprobs.append(
                _logprob(scores[at], target, request.params.prompt_logprobs or 0))
        return [(_logprob(scores[at], token, request.params.logprobs or 0),) if want else ()
                for request, at, token, want in zip(self.sampled, self.sample_at, tokens,
                                                    wanted, strict=True)]


def _logprob(scores: torch.Tensor, token: int, top: int) -> Logprob:
    best = scores.topk(top) if top else None
    return Logprob(token, float(scores[token]), () if best is None else tuple(
        zip(best.indices.tolist(), best.values.tolist(), strict=True)))
