"""A load generator whose metrics and JSON keys follow vLLM's ``bench serve``.

Per request: TTFT (first streamed token), ITL (gaps between streamed chunks), E2EL (whole
request) and TPOT = (E2EL - TTFT) / (output tokens - 1). Over the run: mean, median, std
and chosen percentiles of each in milliseconds (``mean_ttft_ms``, ``p99_itl_ms``...),
request and token throughput, goodput (requests per second meeting every SLO) and
attainment (the share of the requests sent that met every SLO).

Goodput counts what a user got, so the known ways to inflate it count against it:

- cut short: a request is good only if it streamed every token it asked for (EOS is
  ignored, so an engine that stops early has dropped work), as the usage reports it;
- dropped: a request refused or failed is sent but not good (attainment's denominator
  is every request sent);
- delayed: with arrivals at a rate (an open loop), a request's clock starts at its
  arrival, so time waiting for a free connection counts in its TTFT and latency (a
  closed loop sends when a slot frees, and counts from then, as vLLM's does).

Arrivals: all at once (rate ``inf``) or gamma-distributed gaps (shape = burstiness,
1 = Poisson) rescaled so the run lasts N / rate seconds; ``max_concurrency`` closes the
loop. Prompts are random token ids, so no dataset is needed: of a set length, or, with
``range_ratio`` r (vLLM's ``--random-range-ratio``), each request's prompt and output
lengths drawn uniformly from [L * (1 - r), L * (1 + r)] around the set ones. Or the
prompts come from a file (:func:`read_prompts`: text or token ids, each with its output
length), sampled in a seeded order and repeated when the run needs more.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from swarmfab.errors import import_extra

if TYPE_CHECKING:
    import httpx

__all__ = ["LoadSpec", "Prompt", "RequestRecord", "arrival_gaps", "random_prompts",
           "random_requests", "read_prompts", "run_load", "summarise"]

Prompt = str | list[int]  # text, or token ids

METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True, slots=True)
class LoadSpec:
    base_url: str
    model: str | None = None
    num_prompts: int = 32
    input_len: int = 32
    output_len: int = 32
    range_ratio: float = 0.0   # lengths uniform in [L * (1 - r), L * (1 + r)]
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    num_warmups: int = 1
    seed: int = 0
    api_key: str | None = None
    percentiles: tuple[float, ...] = (99.0,)
    goodput: dict[str, float] = field(default_factory=dict)   # metric -> SLO in ms
    timeout_s: float = 600.0
    dataset: tuple[tuple[Prompt, int], ...] = ()  # (prompt, output length); else random


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it (seconds; ``itl`` between streamed chunks)."""

    prompt_len: int
    success: bool = False
    asked_tokens: int = 0  # max_tokens sent (EOS ignored: the tokens owed)
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    text: str = ""
    error: str = ""

    @property
    def cut_short(self) -> bool:
        """It streamed fewer tokens than it asked for (0 asked: unknown, not cut)."""
        return self.output_tokens < self.asked_tokens

    @property
    def tpot(self) -> float | None:
        if self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def random_prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Token-id prompts of exactly ``length`` tokens (ids 3.. avoid the usual specials)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(count)]


def random_requests(count: int, input_len: int, output_len: int, range_ratio: float,
                    vocab: int, seed: int) -> list[tuple[list[int], int]]:
    """``count`` (prompt, output length) pairs; with ``range_ratio`` r each length is
    drawn uniformly from [L * (1 - r), L * (1 + r)] (at least 1 prompt token and 2
    output tokens, so every request has a time per output token)."""
    if not 0 <= range_ratio < 1:
        raise ValueError(f"range_ratio must lie in [0, 1), got {range_ratio}")
    rng = random.Random(seed)

    def length(around: int, least: int) -> int:
        low = max(least, math.floor(around * (1 - range_ratio)))
        return rng.randint(low, max(low, math.ceil(around * (1 + range_ratio))))

    lengths = [(length(input_len, 1), length(output_len, 2)) for _ in range(count)]
    prompts = random_prompts(count, max(n for n, _ in lengths), vocab, seed)
    return [(prompt[:n], out) for prompt, (n, out) in zip(prompts, lengths, strict=True)]


def read_prompts(path: Path, output_len: int) -> list[tuple[Prompt, int]]:
    """(prompt, output length) pairs from a JSON array or JSON lines of objects with a
    ``prompt`` (text, or a list of token ids) and optionally ``output_len`` (else
    ``output_len``); ValueError naming the first bad entry."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read: {exc}") from exc
    try:
        entries = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is neither a JSON array nor JSON lines: {exc}") from exc
    if not entries:
        raise ValueError(f"{path} holds no prompts")
    pairs = []
    for index, entry in enumerate(entries):
        prompt = entry.get("prompt") if isinstance(entry, dict) else None
        length = entry.get("output_len", output_len) if isinstance(entry, dict) else None
        value: Prompt
        if isinstance(prompt, str) and prompt:
            value = prompt
        elif isinstance(prompt, list) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            value = [int(t) for t in prompt]
        else:
            raise ValueError(f"{path}, entry {index}: expected {{\"prompt\": text or token "
                             f"ids, \"output_len\": N}}, got {json.dumps(entry)[:80]}")
        if not isinstance(length, int) or isinstance(length, bool) or length < 2:
            raise ValueError(f"{path}, entry {index}: output_len must be an integer of at "
                             f"least 2, got {length!r}")
        pairs.append((value, length))
    return pairs


def _sampled(dataset: Sequence[tuple[Prompt, int]], count: int, seed: int
             ) -> list[tuple[Prompt, int]]:
    """``count`` entries in a seeded order, each used once before any repeats."""
    order = list(range(len(dataset)))
    random.Random(seed).shuffle(order)
    return [dataset[order[i % len(order)]] for i in range(count)]


def arrival_gaps(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Gaps before each request: zero for ``inf``, else gamma(burstiness) draws scaled so
    they sum to count / rate."""
    if math.isinf(rate):
        return [0.0] * count
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count)
    return list(gaps * (count / rate) / gaps.sum())


async def _one(client: httpx.AsyncClient, model: str, prompt: Prompt, max_tokens: int,
               arrived: float | None = None) -> RequestRecord:
    """One streamed request; its clock starts at ``arrived`` (perf_counter) if given,
    else now."""
    import httpx  # run_load has imported it (or said which extra brings it)

    # a text's tokens come with the usage
    record = RequestRecord(prompt_len=len(prompt), asked_tokens=max_tokens)
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    start = last = time.perf_counter() if arrived is None else arrived
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                record.error = (await response.aread()).decode(errors="replace")[:500]
                return record
            async for line in _sse_lines(response):
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    record.output_tokens = chunk["usage"]["completion_tokens"]
                    record.prompt_len = chunk["usage"].get("prompt_tokens", record.prompt_len)
                if not chunk.get("choices"):
                    continue
                now = time.perf_counter()
                if record.ttft == 0.0:
                    record.ttft = now - start
                else:
                    record.itl.append(now - last)
                last = now
                record.text += chunk["choices"][0].get("text") or ""
        record.latency = time.perf_counter() - start
        record.success = True
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    return record


async def _sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The lines of a server-sent event stream: split at "\\n" alone. (httpx's
    ``aiter_lines`` splits at every Unicode line break, and a generated token's text,
    sent raw in the JSON, may be one: U+0085 or U+2028 from a byte-level vocabulary.)"""
    pending = b""
    async for chunk in response.aiter_bytes():
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", errors="replace")


async def _model_card(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/v1/models")
    response.raise_for_status()
    return dict(response.json()["data"][0])


async def run_load(spec: LoadSpec) -> dict[str, Any]:
    """Run the load against a server; vLLM-style results (see :func:`summarise`)."""
    httpx = import_extra("httpx", "engine", "swarmfab loadgen")
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=spec.base_url, headers=headers, limits=limits,
                                 timeout=spec.timeout_s) as client:
        card = await _model_card(client)
        model = spec.model or card["id"]
        vocab = int(card.get("vocab_size", 256))
        count = spec.num_prompts + spec.num_warmups
        requests: list[tuple[Prompt, int]] = [*random_requests(
            count, spec.input_len, spec.output_len, spec.range_ratio, vocab, spec.seed)] \
            if not spec.dataset else _sampled(spec.dataset, count, spec.seed)
        for prompt, max_tokens in requests[:spec.num_warmups]:
            await _one(client, model, prompt, max_tokens)
        gate = asyncio.Semaphore(spec.max_concurrency or len(requests))

        open_loop = not math.isinf(spec.request_rate)

        async def limited(request: tuple[Prompt, int]) -> RequestRecord:
            arrived = time.perf_counter() if open_loop else None  # see the docstring
            async with gate:
                return await _one(client, model, *request, arrived=arrived)

        tasks = []
        start = time.perf_counter()
        gaps = arrival_gaps(spec.num_prompts, spec.request_rate, spec.burstiness, spec.seed)
        for gap, request in zip(gaps, requests[spec.num_warmups:], strict=True):
            if gap:
                await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(limited(request)))
        records = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    result = summarise(records, duration, spec.percentiles, spec.goodput)
    result.update(model_id=model, request_rate=spec.request_rate,
                  burstiness=spec.burstiness, max_concurrency=spec.max_concurrency)
    return result


def summarise(records: Sequence[RequestRecord], duration: float,
              percentiles: Sequence[float] = (99.0,),
              goodput: dict[str, float] | None = None) -> dict[str, Any]:
    """vLLM ``bench serve`` keys: throughputs, then mean/median/std/pNN of each metric."""
    done = [r for r in records if r.success]
    values: dict[str, list[float]] = {
        "ttft": [r.ttft for r in done],
        "tpot": [t for r in done if (t := r.tpot) is not None],
        "itl": [gap for r in done for gap in r.itl],
        "e2el": [r.latency for r in done],
    }
    total_in = sum(r.prompt_len for r in done)
    total_out = sum(r.output_tokens for r in done)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration,
        "request_goodput": _good(done, goodput or {}) / duration if goodput else None,
        "attainment": _good(done, goodput or {}) / len(records) if records else 0.0,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    for metric in METRICS:
        ms = np.array(values[metric]) * 1000.0 if values[metric] else np.zeros(1)
        result[f"mean_{metric}_ms"] = float(ms.mean())
        result[f"median_{metric}_ms"] = float(np.median(ms))
        result[f"std_{metric}_ms"] = float(ms.std())
        for p in percentiles:
            result[f"p{p:g}_{metric}_ms"] = float(np.percentile(ms, p))
    result.update(input_lens=[r.prompt_len for r in records],
                  output_lens=[r.output_tokens for r in records],
                  ttfts=[r.ttft for r in records], itls=[r.itl for r in records],
                  errors=[r.error for r in records])
    return result


def _good(records: Sequence[RequestRecord], slos: dict[str, float]) -> int:
    """Requests served whole and meeting every SLO (ms): ttft, tpot, e2el."""
    def meets(record: RequestRecord) -> bool:
        if not record.success or record.cut_short:
            return False
        seen = {"ttft": record.ttft, "tpot": record.tpot or 0.0, "e2el": record.latency}
        return all(seen[name] * 1000.0 <= limit for name, limit in slos.items())
    return sum(1 for record in records if meets(record))
