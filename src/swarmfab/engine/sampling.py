"""Next tokens from logits, per request: greedy, temperature, top-k, top-p, seed."""

from __future__ import annotations

import torch

from swarmfab.engine.request import Request, SamplingParams

__all__ = ["sample"]


def sample(logits: torch.Tensor, requests: list[Request]) -> list[int]:
    """One token per row of ``logits`` (row i belongs to ``requests[i]``)."""
    logits = _forbid_early_stop(logits, requests)
    greedy = [i for i, r in enumerate(requests) if r.params.greedy]
    tokens = [0] * len(requests)
    if greedy:
        for i, token in zip(greedy, logits[greedy].argmax(-1).tolist(), strict=True):
            tokens[i] = token
    for i, request in enumerate(requests):
        if not request.params.greedy:
            tokens[i] = _draw(logits[i], request.params, request.generator)
    return tokens


def _forbid_early_stop(logits: torch.Tensor, requests: list[Request]) -> torch.Tensor:
    """Before ``min_tokens``, EOS and stop tokens cannot be drawn."""
    rows = [(i, r) for i, r in enumerate(requests)
            if len(r.output_ids) < r.params.min_tokens]
    if not rows:
        return logits
    logits = logits.clone()
    for i, request in rows:
        banned = list(request.eos_ids | set(request.params.stop_token_ids))
        logits[i, banned] = float("-inf")
    return logits


def _draw(row: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    scaled = row.float() / params.temperature
    if params.top_k > 0 and params.top_k < scaled.numel():
        threshold = scaled.topk(params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < threshold, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(0) - sorted_probs   # mass of strictly better tokens
        sorted_probs[before >= params.top_p] = 0.0       # the best token always stays
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator).item())
