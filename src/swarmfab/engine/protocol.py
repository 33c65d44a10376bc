"""OpenAI request bodies (with vLLM's common extensions) as pydantic models.

Unknown fields are ignored, as OpenAI does; fields the engine cannot honour (n > 1,
penalties, echo while streaming) are refused with a message naming them rather than
ignored. Log-probabilities take each API's own form: ``logprobs: K`` (and ``echo`` for the
prompt's) in completions, ``logprobs: true`` with ``top_logprobs: K`` in chat.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from swarmfab.engine.request import MAX_LOGPROBS, SamplingParams

__all__ = ["ChatCompletionRequest", "ChatMessage", "CompletionRequest", "StreamOptions",
           "error_body"]


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    model: str | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    return_token_ids: bool = False  # vLLM's extension: each choice's token_ids (not streamed)
    # vLLM's extension: tokens in log-probabilities as "token_id:N", not their text
    return_tokens_as_token_ids: bool = False

    @model_validator(mode="after")
    def _supported(self) -> _Sampling:
        if self.n != 1:
            raise ValueError("n must be 1: this server returns one choice per request")
        if self.presence_penalty or self.frequency_penalty:
            raise ValueError("presence_penalty and frequency_penalty are not supported")
        return self

    def sampling(self, max_tokens: int, logprobs: int | None = None,
                 prompt_logprobs: int | None = None) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=max_tokens, temperature=self.temperature, top_k=self.top_k,
            top_p=self.top_p, seed=self.seed, stop=tuple(stops),
            stop_token_ids=tuple(self.stop_token_ids or ()), ignore_eos=self.ignore_eos,
            min_tokens=self.min_tokens, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str]
    max_tokens: int = Field(16, ge=1)
    echo: bool = False  # the prompt before the completion (with its logprobs, if asked)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _one_prompt(self) -> CompletionRequest:
        texts = isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str)
        if texts and len(self.prompt) != 1:
            raise ValueError("give one prompt per request (a string or token ids)")
        if self.echo and self.stream:
            raise ValueError("echo is supported without stream only")
        return self

    def params(self, max_tokens: int) -> SamplingParams:
        return self.sampling(max_tokens, self.logprobs,
                             self.logprobs if self.echo else None)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def params(self, max_tokens: int) -> SamplingParams:
        return self.sampling(max_tokens, (self.top_logprobs or 0) if self.logprobs else None)


def error_body(message: str, kind: str = "invalid_request_error",
               param: str | None = None, code: int | str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
