"""The accuracy gate for engine settings that change numerics (``dtype``).

A recipe that computes in another precision cannot be held to the reference's greedy
tokens: one near-tie decided the other way and every later token differs, although the
model is as good as before. Such a recipe is judged teacher-forced instead. Each
verification prompt followed by the reference's greedy continuation is scored in one pass
by the reference engine and by the candidate (completions with ``echo`` and
``logprobs``). At every continuation position:

- top-1 agreement: the candidate's most likely token is the reference's token there;
- log-probability error: how far the candidate's log-probability of that token lies
  from the reference's, in nats.

The candidate passes when its agreement over all positions is at least the goal's
``min_top1_agreement`` and no error exceeds ``max_logprob_error``. On a real checkpoint
bfloat16 typically keeps agreement near 1 with errors of a few hundredths; on a
random-weight model, whose next-token distribution is nearly flat, it does not, and the
gate says so.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from swarmfab.errors import MissingExtraError
from swarmfab.records import CheckResult

try:  # the engine extra
    import httpx
except ImportError as exc:
    raise MissingExtraError("httpx", "engine", 'an engine goal (kind = "engine")') from exc

__all__ = ["Scores", "numerics_checks", "score_continuations"]


@dataclass(frozen=True, slots=True)
class Scores:
    """One prompt's continuation as an engine scores it, position by position."""

    best: tuple[int, ...]        # the engine's most likely token
    logprob: tuple[float, ...]   # its log-probability of the continuation's token


async def _score(url: str, prompts: list[list[int]], continuations: list[list[int]],
                 timeout_s: float) -> list[Scores]:
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as client:
        async def one(prompt: list[int], continuation: list[int]) -> Scores:
            response = await client.post("/v1/completions", json={
                "prompt": prompt + continuation, "max_tokens": 1, "temperature": 0.0,
                "logprobs": 1, "echo": True, "return_tokens_as_token_ids": True})
            response.raise_for_status()
            logprobs = response.json()["choices"][0]["logprobs"]
            at = range(len(prompt), len(prompt) + len(continuation))
            tops = [logprobs["top_logprobs"][i] for i in at]
            best = tuple(int(max(top, key=top.get).split(":")[1]) for top in tops)
            return Scores(best, tuple(float(logprobs["token_logprobs"][i]) for i in at))

        return list(await asyncio.gather(*(one(p, c) for p, c in
                                           zip(prompts, continuations, strict=True))))


def score_continuations(url: str, prompts: list[list[int]], continuations: list[list[int]],
                        timeout_s: float = 120.0) -> list[Scores]:
    """Each prompt + continuation scored teacher-forced by the engine at ``url``, all
    sent at once."""
    return asyncio.run(_score(url, prompts, continuations, timeout_s))


def numerics_checks(continuations: list[list[int]], reference: list[Scores],
                    candidate: list[Scores], min_agreement: float, max_error: float
                    ) -> list[CheckResult]:
    """One check per prompt (its agreement and largest error), then the overall one that
    decides: agreement over all positions and the largest error against the limits."""
    checks = []
    agreeing = positions = 0
    worst = 0.0
    for index, (tokens, want, have) in enumerate(zip(continuations, reference, candidate,
                                                     strict=True)):
        same = sum(b == t for b, t in zip(have.best, tokens, strict=True))
        error = max((abs(a - b) for a, b in zip(have.logprob, want.logprob, strict=True)),
                    default=0.0)
        agreeing, positions, worst = agreeing + same, positions + len(tokens), max(worst,
                                                                                   error)
        checks.append(CheckResult(
            f"prompt {index} ({len(tokens)} tokens)", "teacher-forced",
            same >= min_agreement * len(tokens) and error <= max_error,
            f"top-1 agreement {same}/{len(tokens)}, log-probability error {error:.3g}"))
    agreement = agreeing / positions if positions else 1.0
    passed = agreement >= min_agreement and worst <= max_error
    checks.append(CheckResult(
        "all prompts", "numerics", passed,
        f"top-1 agreement {agreement:.3f} (at least {min_agreement:g}), largest "
        f"log-probability error {worst:.3g} nats (at most {max_error:g})"))
    return checks
