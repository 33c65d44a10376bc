"""A request's life: parameters, state, generated tokens and stop conditions."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

import torch

from swarmfab.engine.tokenizer import Detokenizer, Tokenizer
from swarmfab.errors import EngineError

__all__ = ["MAX_LOGPROBS", "FinishReason", "Logprob", "Request", "RequestOutput",
           "RequestStatus", "SamplingParams"]

MAX_LOGPROBS = 20  # alternatives per position at most (OpenAI's chat API allows 20)

_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request decoding choices (OpenAI's, plus vLLM's ``top_k``, ``min_tokens``,
    ``ignore_eos``). ``temperature`` 0 is greedy; ``top_k`` 0 or -1 and ``top_p`` 1 are off."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    # log-probabilities (of the model's distribution, before sampling's changes): of each
    # generated token with its ``logprobs`` most likely alternatives; of each prompt token
    # after the first with ``prompt_logprobs`` alternatives. None: not computed
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        problems = []
        for name in ("logprobs", "prompt_logprobs"):
            wanted = getattr(self, name)
            if wanted is not None and not 0 <= wanted <= MAX_LOGPROBS:
                problems.append(f"{name} must be between 0 and {MAX_LOGPROBS}, got {wanted}")
        if self.max_tokens < 1:
            problems.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < -1:
            problems.append(f"top_k must be -1 (off), 0 (off) or positive, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            problems.append(f"min_tokens must be between 0 and max_tokens ({self.max_tokens})"
                            f", got {self.min_tokens}")
        if any(not s for s in self.stop):
            problems.append("stop strings must not be empty")
        if problems:
            raise EngineError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, slots=True)
class Logprob:
    """A token's log-probability and the most likely tokens at its position."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()   # (token, logprob), most likely first


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"   # waiting again: its memory was taken, it will recompute
    FINISHED = "finished"


class FinishReason(enum.Enum):
    STOP = "stop"             # EOS, a stop token or a stop string
    LENGTH = "length"         # max_tokens or the model's length
    ABORT = "abort"           # the client went away


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one step added to a request (for streaming) and whether it is done."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason | None
    time: float
    logprobs: tuple[Logprob, ...] = ()            # of token_ids, when asked for
    prompt_logprobs: tuple[Logprob, ...] | None = None  # once, with the first token

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(eq=False, slots=True)
class Request:
    """One sequence in the engine. ``num_computed`` tokens of ``all_ids`` are in memory."""

    prompt_ids: list[int]
    params: SamplingParams
    eos_ids: frozenset[int]
    detokenizer: Detokenizer | None
    id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    status: RequestStatus = RequestStatus.WAITING
    state_slot: int | None = None
    blocks: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    emitted_chars: int = 0
    generator: torch.Generator | None = None
    prompt_logprobs: list[Logprob] = field(default_factory=list)  # prompt tokens 1, 2, ...

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise EngineError("the prompt is empty; give at least one token")
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed)

    @classmethod
    def create(cls, prompt_ids: list[int], params: SamplingParams, eos_ids: frozenset[int],
               tokenizer: Tokenizer | None, request_id: str | None = None) -> Request:
        request = cls(list(prompt_ids), params, eos_ids,
                      Detokenizer(tokenizer) if tokenizer else None)
        if request_id is not None:
            request.id = request_id
        return request

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def token(self, position: int) -> int:
        prompt = len(self.prompt_ids)
        return self.prompt_ids[position] if position < prompt else self.output_ids[
            position - prompt]

    @property
    def text(self) -> str:
        return self.detokenizer.text if self.detokenizer else ""

    def append(self, token: int, max_len: int) -> None:
        """Record a sampled token and decide whether the request is finished."""
        self.output_ids.append(token)
        done = len(self.output_ids)
        stopping_allowed = done >= self.params.min_tokens
        cut = False
        stop_token = token in self.params.stop_token_ids or (
            not self.params.ignore_eos and token in self.eos_ids)
        if stopping_allowed and stop_token:
            self.finish_reason = FinishReason.STOP
        elif self.detokenizer is not None:
            self.detokenizer.add(token)
            cut = stopping_allowed and _cut_at_stop_string(
                self.detokenizer, self.params.stop, self.emitted_chars)
            if cut:
                self.finish_reason = FinishReason.STOP
        if self.finish_reason is None and (done >= self.params.max_tokens
                                           or self.num_tokens >= max_len):
            self.finish_reason = FinishReason.LENGTH
        if self.finish_reason is not None and self.detokenizer is not None and not cut:
            self.detokenizer.flush()  # a last incomplete character is released as is

    def take_output(self, new_tokens: tuple[int, ...], logprobs: tuple[Logprob, ...] = ()
                    ) -> RequestOutput:
        """The text not yet streamed; a possible stop-string prefix is held back. The
        prompt's log-probabilities come with the first token, when they were asked for."""
        text = self.text
        end = len(text)
        if self.finish_reason is None and self.params.stop:
            end = max(self.emitted_chars, end - max(len(s) for s in self.params.stop) + 1)
        new, self.emitted_chars = text[self.emitted_chars:end], end
        prompt = (tuple(self.prompt_logprobs)
                  if self.params.prompt_logprobs is not None and len(self.output_ids) == 1
                  and new_tokens else None)
        return RequestOutput(self.id, new, new_tokens, len(self.prompt_ids),
                             len(self.output_ids), self.finish_reason, time.monotonic(),
                             logprobs, prompt)


def _cut_at_stop_string(detokenizer: Detokenizer, stops: tuple[str, ...], emitted: int) -> bool:
    """Truncate the text before the first stop string (searching only new text)."""
    text = detokenizer.text
    hits = [text.find(s, max(0, emitted - len(s))) for s in stops]
    found = [h for h in hits if h >= 0]
    if not found:
        return False
    detokenizer.text = text[:min(found)]
    return True
