"""A fake engine: a continuous-batching server simulated over the OpenAI HTTP API.

It stands beside the real adapters as a test double stands beside a plug-in: the engine
factory drives it exactly as it drives vLLM (a process on a loopback port, ``/health``,
``/v1/models``, completions with token ids, streamed with usage), and its knobs change
its serving in known ways, so a test can say what a search must find:

- ``max_num_seqs``: sequences in a step. A step costs a fixed time plus a little per
  sequence, so more sequences serve more requests per second, each a little slower;
  the default (2) leaves most of that on the table under concurrent traffic;
- ``max_num_batched_tokens``: prompt tokens a step takes (a long prompt is spread over
  steps, delaying its first token and the step's decodes);
- ``shortcut``: steps 30% shorter, but every fourth token differs from the reference's
  (what verification must catch).

Tokens are a function of the prompt's ids and the position, so every correct setting
streams the same ones. ``python -m swarmfab.serving.engines.fake MODEL_DIR --port P
--recipe FILE`` serves (``vocab_size`` from MODEL_DIR/config.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmfab.kernels import DesignSpace, Knob, Setting
from swarmfab.serving.engines.base import (
    EngineAdapter,
    Launch,
    SpaceContext,
    read_settings,
    recipe_json,
)

__all__ = ["FakeEngine", "fake_tokens"]

STEP_S = 0.010        # a step's fixed cost
PER_SEQUENCE_S = 0.0008
PER_PROMPT_TOKEN_S = 0.00005


class FakeEngine(EngineAdapter):
    name = "fake"
    scores_numerics = False  # no dtype knob

    def space(self, context: SpaceContext) -> DesignSpace:
        knobs = (
            Knob("max_num_seqs", "scheduling", (1, 2, 4, 8, 16, 32), 2, ordered=True,
                 help="sequences in a step"),
            Knob("max_num_batched_tokens", "scheduling", (16, 64, 256, 1024), 64,
                 ordered=True, help="prompt tokens a step takes"),
            Knob("shortcut", "numerics", ("off", "on"), "off",
                 help="shorter steps that change every fourth token"),
        )

        def render(setting: Setting, threads: int) -> tuple[dict[str, str], str,
                                                            tuple[str, ...]]:
            return {"recipe.json": recipe_json(self.name, setting)}, "recipe.json", ()

        starting = (({"max_num_seqs": 16}, "more sequences per step"),
                    ({"shortcut": "on"}, "shorter steps"))
        return DesignSpace("fake", "engine", "engine-recipe", knobs, render,
                           starting=starting)

    def launch(self, model_dir: Path, recipe_file: Path, port: int, goal: Any) -> Launch:
        return Launch([sys.executable, "-m", "swarmfab.serving.engines.fake",
                       str(model_dir), "--port", str(port), "--recipe", str(recipe_file)])


def fake_tokens(prompt: list[int], count: int, vocab: int, shortcut: bool = False
                ) -> list[int]:
    """The tokens the fake engine streams after ``prompt``."""
    seed = sum((i + 1) * t for i, t in enumerate(prompt)) % 1_000_003
    tokens = [3 + (seed * 31 + i * 7919) % (vocab - 3) for i in range(count)]
    if shortcut:
        tokens = [3 + (t - 2) % (vocab - 3) if i % 4 == 3 else t for i, t in enumerate(tokens)]
    return tokens


@dataclass(eq=False)
class _Sequence:
    prompt: int   # tokens
    tokens: list[int]
    prefilled: int = 0
    sent: int = 0
    out: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)


class _Scheduler:
    def __init__(self, settings: dict[str, Any]):
        self.max_seqs = int(settings["max_num_seqs"])
        self.budget = int(settings["max_num_batched_tokens"])
        self.scale = 0.7 if settings["shortcut"] == "on" else 1.0
        self.waiting: deque[_Sequence] = deque()
        self.running: list[_Sequence] = []
        self.wake = asyncio.Event()

    async def loop(self) -> None:
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
            while self.waiting and len(self.running) < self.max_seqs:
                self.running.append(self.waiting.popleft())
            budget, prompt_tokens = self.budget, 0
            for seq in self.running:
                if seq.prefilled < seq.prompt and budget > 0:
                    taken = min(budget, seq.prompt - seq.prefilled)
                    seq.prefilled += taken
                    budget -= taken
                    prompt_tokens += taken
            await asyncio.sleep(self.scale * (STEP_S + PER_SEQUENCE_S * len(self.running)
                                              + PER_PROMPT_TOKEN_S * prompt_tokens))
            for seq in list(self.running):
                if seq.prefilled < seq.prompt:
                    continue
                seq.out.put_nowait(seq.tokens[seq.sent])
                seq.sent += 1
                if seq.sent == len(seq.tokens):
                    seq.out.put_nowait(None)
                    self.running.remove(seq)

    async def generate(self, prompt: list[int], tokens: list[int]) -> AsyncIterator[int]:
        seq = _Sequence(len(prompt), tokens)
        self.waiting.append(seq)
        self.wake.set()
        while (token := await seq.out.get()) is not None:
            yield token


def _app(model_dir: Path, settings: dict[str, Any]) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab, name = int(config.get("vocab_size", 256)), model_dir.resolve().name
    scheduler = _Scheduler(settings)
    started: list[asyncio.Task[None]] = []

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "max_model_len": 4096}]})

    async def completions(request: Request) -> Response:
        if not started:
            started.append(asyncio.create_task(scheduler.loop()))
        body = await request.json()
        prompt = body["prompt"]
        ids = [ord(c) % vocab for c in prompt] if isinstance(prompt, str) else list(prompt)
        count = int(body.get("max_tokens", 16))
        tokens = fake_tokens(ids, count, vocab, settings["shortcut"] == "on")
        made = int(time.time())
        if not body.get("stream"):
            got = [token async for token in scheduler.generate(ids, tokens)]
            return JSONResponse({"object": "text_completion", "created": made, "model": name,
                                 "choices": [{"index": 0, "text": _text(got),
                                              "token_ids": got, "finish_reason": "length"}],
                                 "usage": _usage(ids, got)})

        async def stream() -> AsyncIterator[str]:
            got = []
            async for token in scheduler.generate(ids, tokens):
                got.append(token)
                yield "data: " + json.dumps({"object": "text_completion", "model": name,
                                             "choices": [{"index": 0, "text": _text([token]),
                                                          "finish_reason": None}]}) + "\n\n"
            if (body.get("stream_options") or {}).get("include_usage"):
                yield "data: " + json.dumps({"choices": [], "usage": _usage(ids, got)}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                             Route("/v1/completions", completions, methods=["POST"])])


def _text(tokens: list[int]) -> str:
    return "".join(f" t{token}" for token in tokens)


def _usage(prompt: list[int], tokens: list[int]) -> dict[str, int]:
    return {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
            "total_tokens": len(prompt) + len(tokens)}


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="the fake engine's server")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--recipe", type=Path, required=True)
    args = parser.parse_args(argv)
    settings = {**{k.name: k.default for k in FakeEngine().space(
        SpaceContext(None, args.model_dir, {})).knobs},
        **read_settings(args.recipe, FakeEngine.name)}
    uvicorn.run(_app(args.model_dir, settings), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
