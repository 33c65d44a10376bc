"""Chat-model providers behind one small interface, through the official SDKs.

``OpenAIProvider`` speaks the OpenAI chat-completions protocol, so it also reaches any
compatible server (vLLM, SGLang, Ollama, llama.cpp) given a ``base_url``;
``AnthropicProvider`` speaks the Messages API. Timeouts, and retries with exponential
backoff on 408/409/429/5xx and connection errors (honouring ``Retry-After``), are the
SDKs' own. Whatever goes wrong after the retries becomes one :class:`ProviderError`: a
remote model is an untrusted, unreliable service and the run must survive it.

The API key lives only in the provider object: it is read once from the environment,
never stored, and the variable is taken out of the process environment when the
sandbox would not scrub it by name, so no candidate job can inherit it.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from swarmfab.errors import GoalError, ProviderError, import_extra
from swarmfab.goal import LLMSettings
from swarmfab.sandbox import scrubbed_environment

__all__ = [
    "AnthropicProvider",
    "Completion",
    "Message",
    "OpenAIProvider",
    "Provider",
    "make_provider",
    "read_api_key",
]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class Completion:
    """One model reply and what it cost. ``estimated``: the server reported no usage and
    the token counts are estimated from the text (about four characters a token)."""

    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    finish_reason: str | None = None
    estimated: bool = False


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters a token) for budgets and estimates."""
    return (len(text) + 3) // 4


class Provider(ABC):
    """A chat model. ``complete`` returns a :class:`Completion` or raises ProviderError."""

    name: str
    model: str

    @abstractmethod
    def complete(self, messages: list[Message], max_tokens: int,
                 temperature: float, timeout_s: float | None = None) -> Completion:
        """One reply to ``messages`` (the first may be a system message). ``timeout_s``
        bounds this call, retries included (None: the provider's own timeout and
        retries), so a run's budget holds while a model is slow."""


def _bounded(client: Any, timeout_s: float | None, own_timeout_s: float, retries: int) -> Any:
    """The SDK client, or a copy that gives up after ``timeout_s`` where that comes
    before its own timeout and retries would."""
    if timeout_s is None or timeout_s >= own_timeout_s * (retries + 1):
        return client
    return client.with_options(timeout=max(0.1, timeout_s), max_retries=0)


class OpenAIProvider(Provider):
    """OpenAI, or any server that speaks its chat-completions protocol."""

    name = "openai"

    def __init__(self, model: str, api_key: str, base_url: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 3, stream: bool = False):
        openai = import_extra("openai", "llm", "the openai provider (LLM agents)")
        self.model, self.stream = model, stream
        self._timeout_s, self._retries = timeout_s, max_retries
        self._client: Any = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s,
                                     max_retries=max_retries)

    def complete(self, messages: list[Message], max_tokens: int,
                 temperature: float, timeout_s: float | None = None) -> Completion:
        started = time.monotonic()
        payload = [{"role": m.role, "content": m.content} for m in messages]
        client = _bounded(self._client, timeout_s, self._timeout_s, self._retries)
        try:
            if self.stream:
                text, usage, finish = self._streamed(client, payload, max_tokens, temperature)
            else:
                text, usage, finish = self._whole(client, payload, max_tokens, temperature)
        except Exception as exc:  # the SDK, httpx, JSON: anything a remote can cause
            raise _translated(exc) from exc
        return _completion(messages, text, usage, finish, time.monotonic() - started)

    def _whole(self, client: Any, payload: list[dict[str, str]], max_tokens: int,
               temperature: float) -> tuple[str, Any, str | None]:
        reply = client.chat.completions.create(
            model=self.model, messages=payload, max_tokens=max_tokens,
            temperature=temperature)
        if not getattr(reply, "choices", None):
            raise ProviderError("the reply has no choices", "malformed")
        choice = reply.choices[0]
        usage = reply.usage
        return choice.message.content or "", usage, choice.finish_reason

    def _streamed(self, client: Any, payload: list[dict[str, str]], max_tokens: int,
                  temperature: float) -> tuple[str, Any, str | None]:
        chunks = client.chat.completions.create(
            model=self.model, messages=payload, max_tokens=max_tokens,
            temperature=temperature, stream=True, stream_options={"include_usage": True})
        parts: list[str] = []
        usage, finish = None, None
        for chunk in chunks:
            usage = chunk.usage or usage  # the last chunk carries it, if the server sends it
            for choice in chunk.choices or ():
                if choice.delta is not None and choice.delta.content:
                    parts.append(choice.delta.content)
                finish = choice.finish_reason or finish
        return "".join(parts), usage, finish


class AnthropicProvider(Provider):
    """Anthropic's Messages API."""

    name = "anthropic"

    def __init__(self, model: str, api_key: str, base_url: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 3, stream: bool = False):
        anthropic = import_extra("anthropic", "llm", "the anthropic provider (LLM agents)")
        self.model, self.stream = model, stream
        self._timeout_s, self._retries = timeout_s, max_retries
        self._client: Any = anthropic.Anthropic(api_key=api_key, base_url=base_url,
                                           timeout=timeout_s, max_retries=max_retries)

    def complete(self, messages: list[Message], max_tokens: int,
                 temperature: float, timeout_s: float | None = None) -> Completion:
        started = time.monotonic()
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        client = _bounded(self._client, timeout_s, self._timeout_s, self._retries)
        try:
            reply = client.messages.create(  # the SDK sets no temperature here
                model=self.model, system=system, messages=turns, max_tokens=max_tokens)
            text = "".join(getattr(block, "text", "") for block in reply.content or ())
            usage = _Usage(reply.usage.input_tokens, reply.usage.output_tokens)
            finish = reply.stop_reason
        except Exception as exc:
            raise _translated(exc) from exc
        return _completion(messages, text, usage, finish, time.monotonic() - started)


@dataclass(frozen=True, slots=True)
class _Usage:
    prompt_tokens: int
    completion_tokens: int


def _completion(messages: list[Message], text: str, usage: Any, finish: str | None,
                latency_s: float) -> Completion:
    tokens_in = getattr(usage, "prompt_tokens", None)
    tokens_out = getattr(usage, "completion_tokens", None)
    if isinstance(tokens_in, int) and isinstance(tokens_out, int):
        return Completion(text, tokens_in, tokens_out, latency_s, finish)
    prompt = sum(estimate_tokens(m.content) for m in messages)
    return Completion(text, prompt, estimate_tokens(text), latency_s, finish, estimated=True)


def _translated(exc: Exception) -> ProviderError:
    """One ProviderError whose kind says what happened (after the SDK's own retries)."""
    if isinstance(exc, ProviderError):
        return exc
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if "Timeout" in name:
        kind = "timeout"
    elif status == 429 or "RateLimit" in name:
        kind = "rate-limited"
    elif status in (401, 403):
        kind = "unauthorised"
    elif isinstance(status, int):
        kind = f"http-{status}"
    elif "Connection" in name:
        kind = "unreachable"
    else:
        kind = "malformed"
    message = str(exc).splitlines()[0][:300] if str(exc) else name
    return ProviderError(f"{name}: {message}", kind)


def read_api_key(settings: LLMSettings) -> str:
    """The API key from the environment; the variable leaves the process environment
    when the sandbox's scrub would not recognise its name as a credential.

    A local server usually needs no key: an unset variable then gives a placeholder, but
    the public endpoints refuse to start without one.
    """
    variable = settings.key_variable()
    key = os.environ.get(variable)
    if variable in os.environ and scrubbed_environment({variable: ""}):
        del os.environ[variable]  # not credential-looking: make sure no job inherits it
    if key:
        return key
    if settings.base_url is None:
        raise GoalError(f"the {settings.provider} API needs a key: set {variable} "
                        "(or name another variable with --llm-api-key-env)")
    return "unused"  # local servers (vLLM, Ollama) accept any key


def make_provider(settings: LLMSettings) -> Provider:
    """The provider a goal's ``[llm]`` table describes."""
    if settings.model is None:
        raise GoalError("the llm agents need a model: set llm.model or pass --llm-model")
    kind = AnthropicProvider if settings.provider == "anthropic" else OpenAIProvider
    return kind(settings.model, read_api_key(settings), settings.base_url, settings.timeout_s,
                settings.max_retries, settings.stream)
