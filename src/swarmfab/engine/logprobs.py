"""Log-probabilities in the OpenAI response shapes: completions' and chat's.

Completions (the legacy API, which evaluation harnesses use to score text) answer
``logprobs: K`` with parallel lists: ``tokens``, ``token_logprobs``, ``top_logprobs``
(token -> logprob, the K most likely) and ``text_offset``; with ``echo`` the prompt's
tokens come first, the very first with ``null`` (nothing precedes it). Chat answers
``logprobs: true, top_logprobs: K`` with ``content``: one object per token, with its
UTF-8 ``bytes``. A token is named by its text, or as ``token_id:N`` where the request
asks (vLLM's ``return_tokens_as_token_ids``) or the model has no tokenizer; two ids of
the same text (byte fragments) then stay apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from swarmfab.engine.request import Logprob
from swarmfab.engine.tokenizer import Tokenizer

__all__ = ["TokenText", "chat_logprobs", "completion_logprobs", "echoed", "joined",
           "token_namer"]

TokenText = Callable[[int], str]


def token_namer(tokenizer: Tokenizer | None, as_ids: bool) -> TokenText:
    """How a token id is written in a response."""
    if tokenizer is None or as_ids:
        return lambda token: f"token_id:{token}"
    return lambda token: tokenizer.decode([token])


def completion_logprobs(entries: Sequence[Logprob], name: TokenText,
                        offset: int = 0) -> dict[str, Any]:
    """Completions' ``logprobs`` object, text offsets counted from ``offset``."""
    tokens: list[str] = []
    scores: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for entry in entries:
        text = name(entry.token)
        offsets.append(offset)
        offset += len(text)
        tokens.append(text)
        scores.append(entry.logprob)
        tops.append({name(t): p for t, p in entry.top})
    return {"tokens": tokens, "token_logprobs": scores, "top_logprobs": tops,
            "text_offset": offsets}


def echoed(first_token: int, prompt: Sequence[Logprob], name: TokenText) -> dict[str, Any]:
    """Completions' ``logprobs`` for an echoed prompt: the first token unscored."""
    text = name(first_token)
    rest = completion_logprobs(prompt, name, len(text))
    return {"tokens": [text, *rest["tokens"]],
            "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]],
            "text_offset": [0, *rest["text_offset"]]}


def joined(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Completions' ``logprobs`` objects one after another (echo, then the completion);
    offsets continue from the end of the text before."""
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                           "text_offset": []}
    shift = 0
    for part in parts:
        for key in ("tokens", "token_logprobs", "top_logprobs"):
            out[key].extend(part[key])
        out["text_offset"].extend(o + shift for o in part["text_offset"])
        shift = (out["text_offset"][-1] + len(out["tokens"][-1])) if out["tokens"] else 0
    return out


def chat_logprobs(entries: Sequence[Logprob], name: TokenText) -> dict[str, Any]:
    """Chat's ``logprobs`` object."""
    def one(token: int, logprob: float) -> dict[str, Any]:
        text = name(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**one(e.token, e.logprob),
                         "top_logprobs": [one(t, p) for t, p in e.top]} for e in entries]}
