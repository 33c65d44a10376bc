"""An OpenAI-compatible HTTP front end (FastAPI): completions and chat, streamed or not.

Endpoints: ``/v1/completions``, ``/v1/chat/completions`` (SSE with ``stream: true``,
usage counts, vLLM's ``ignore_eos`` / ``min_tokens`` / ``top_k``), ``/v1/models``,
``/health`` and ``/metrics`` (Prometheus); log-probabilities (:mod:`logprobs`), with
completions' ``echo`` scoring a text as evaluation harnesses do. With an API key every endpoint but
``/health`` wants ``Authorization: Bearer KEY``. Errors use OpenAI's body shape.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from swarmfab.engine.async_engine import AsyncEngine
from swarmfab.engine.engine import EngineConfig, LLMEngine
from swarmfab.engine.logprobs import (
    TokenText,
    chat_logprobs,
    completion_logprobs,
    echoed,
    joined,
    token_namer,
)
from swarmfab.engine.protocol import ChatCompletionRequest, CompletionRequest, error_body
from swarmfab.engine.request import RequestOutput, SamplingParams
from swarmfab.engine.slots import KernelSlots
from swarmfab.errors import EngineError, MissingExtraError, import_extra

try:  # the engine extra
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError as exc:
    raise MissingExtraError(exc.name or "fastapi", "engine", "serving a model") from exc

__all__ = ["create_app", "serve"]


class _EngineCollector:
    """Reads the engine's counters at scrape time (no bookkeeping in the request path)."""

    def __init__(self, engine: AsyncEngine):
        self._engine = engine.engine

    def collect(self) -> Iterable[Metric]:
        e = self._engine
        stats = e.stats
        gauges = {
            "num_requests_waiting": ("Requests waiting to be scheduled",
                                     len(e.scheduler.waiting)),
            "num_requests_running": ("Requests holding a state slot",
                                     len(e.scheduler.running)),
            "kv_cache_usage_perc": ("Share of KV blocks in use (0-1)",
                                    e.pool.used / e.pool.num_blocks),
            "generation_tokens_per_second": ("Output tokens per second, last 10 s",
                                             stats.tokens_per_second()),
        }
        for name, (text, value) in gauges.items():
            yield GaugeMetricFamily(f"swarmfab:{name}", text, value=value)
        counters = {
            "prompt_tokens": ("Prompt tokens computed", stats.prompt_tokens),
            "generation_tokens": ("Tokens generated", stats.generation_tokens),
            "request_success": ("Requests finished", stats.finished),
            "request_aborted": ("Requests aborted (client gone)", stats.aborted),
            "num_preemptions": ("Sequences preempted for KV memory", stats.preemptions),
        }
        for name, (text, value) in counters.items():
            yield CounterMetricFamily(f"swarmfab:{name}", text, value=value)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(error_body(message, kind, code=status), status_code=status)


class _BearerAuth:
    """Plain ASGI middleware (not BaseHTTPMiddleware, which hides client disconnects
    from the endpoints): every path but /health needs ``Authorization: Bearer KEY``."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                refusal = _error(401, "missing or wrong API key: send 'Authorization: "
                                      "Bearer KEY'", "authentication_error")
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(engine: AsyncEngine, model_name: str, api_key: str | None = None) -> FastAPI:
    """The FastAPI app around a (not yet started) :class:`AsyncEngine`."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        yield
        engine.stop()

    app = FastAPI(title="swarmfab engine", lifespan=lifespan)
    registry = CollectorRegistry()
    registry.register(_EngineCollector(engine))
    tokenizer = engine.engine.tokenizer
    capacity = engine.engine.scheduler.capacity_tokens

    if api_key:
        app.add_middleware(_BearerAuth, api_key=api_key)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        return _error(400, f"invalid request: {problems}")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": model_name, "object": "model", "created": int(time.time()),
            "owned_by": "swarmfab", "max_model_len": capacity,
            "vocab_size": engine.engine.model.config.vocab_size}]}

    def _prompt_ids(prompt: str | list[int] | list[str]) -> list[int]:
        if isinstance(prompt, str):
            return _encode(prompt)
        if prompt and isinstance(prompt[0], str):
            return _encode(str(prompt[0]))
        return [int(t) for t in prompt]

    def _encode(text: str) -> list[int]:
        if tokenizer is None:
            raise EngineError("this model has no tokenizer; send token ids as the prompt")
        return tokenizer.encode(text)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request
                          ) -> Response | dict[str, Any]:
        try:
            ids = _prompt_ids(body.prompt)
            params = body.params(body.max_tokens)
        except EngineError as exc:
            return _error(400, str(exc))
        echo = None
        if body.echo:
            echo = (body.prompt if isinstance(body.prompt, str) else
                    str(body.prompt[0]) if body.prompt and isinstance(body.prompt[0], str)
                    else tokenizer.decode(ids) if tokenizer else "", ids)
        shape = _Shape(body.model or model_name, chat=False, echo=echo,
                       names=_names(body.logprobs is not None, body.return_tokens_as_token_ids))
        return await _respond(request, shape, ids, params, body.stream, body.include_usage,
                              token_ids=body.return_token_ids)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, request: Request) -> Response | dict[str, Any]:
        try:
            prompt = tokenizer.chat_prompt([m.model_dump() for m in body.messages]) \
                if tokenizer else ""
            ids = _encode(prompt)
            wanted = body.max_completion_tokens or body.max_tokens
            params = body.params(wanted or max(1, min(256, capacity - len(ids))))
        except EngineError as exc:
            return _error(400, str(exc))
        shape = _Shape(body.model or model_name, chat=True,
                       names=_names(body.logprobs, body.return_tokens_as_token_ids))
        return await _respond(request, shape, ids, params, body.stream, body.include_usage,
                              token_ids=body.return_token_ids)

    def _names(wanted: bool, as_ids: bool) -> TokenText | None:
        return token_namer(tokenizer, as_ids) if wanted else None

    async def _respond(request: Request, shape: _Shape, ids: list[int],
                       params: SamplingParams, stream: bool, include_usage: bool, *,
                       token_ids: bool = False) -> Response | dict[str, Any]:
        try:
            outputs = engine.generate(ids, params)
            first = await anext(outputs)
        except EngineError as exc:
            return _error(400, str(exc))
        if stream:
            return StreamingResponse(shape.events(first, outputs, include_usage),
                                     media_type="text/event-stream")
        collected = await _collect_unless_gone(request, first, outputs)
        if collected is None:
            return _error(499, "client closed the request")
        return shape.whole(collected, token_ids)

    return app


async def _collect_unless_gone(request: Request, first: RequestOutput,
                               outputs: AsyncGenerator[RequestOutput, None]
                               ) -> list[RequestOutput] | None:
    """Every output; None (and the request aborted) if the client disconnects first."""
    async def consume() -> list[RequestOutput]:
        return [first] + ([o async for o in outputs] if not first.finished else [])

    task = asyncio.ensure_future(consume())
    while not task.done():
        await asyncio.wait({task}, timeout=0.25)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await outputs.aclose()
            return None
    return task.result()


class _Shape:
    """OpenAI's response objects for completions or chat, whole or as SSE chunks;
    ``names`` writes tokens in log-probabilities (None: none were asked for), ``echo``
    is the prompt's text and ids, put before a completion's."""

    def __init__(self, model: str, chat: bool, names: TokenText | None = None,
                 echo: tuple[str, list[int]] | None = None):
        self.model = model
        self.chat = chat
        self.names = names
        self.echo = echo
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.offset = 0  # streamed text so far: completions' text offsets continue from it

    def _object(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (
            ".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": choices}

    @staticmethod
    def _usage(last: RequestOutput) -> dict[str, int]:
        return {"prompt_tokens": last.prompt_tokens,
                "completion_tokens": last.completion_tokens,
                "total_tokens": last.prompt_tokens + last.completion_tokens}

    def _logprobs(self, outputs: list[RequestOutput]) -> dict[str, Any] | None:
        if self.names is None:
            return None
        entries = [e for o in outputs for e in o.logprobs]
        if self.chat:
            return chat_logprobs(entries, self.names)
        parts = []
        if self.echo is not None:
            parts.append(echoed(self.echo[1][0], outputs[0].prompt_logprobs or (),
                                self.names))
        parts.append(completion_logprobs(entries, self.names, self.offset))
        return joined(parts)

    def whole(self, outputs: list[RequestOutput], token_ids: bool = False) -> dict[str, Any]:
        text = (self.echo[0] if self.echo else "") + "".join(o.text for o in outputs)
        last = outputs[-1]
        reason = last.finish_reason.value if last.finish_reason else None
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason,
                                  "logprobs": self._logprobs(outputs)}
        if token_ids:
            choice["token_ids"] = [t for o in outputs for t in o.token_ids]
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**self._object([choice], chunk=False), "usage": self._usage(last)}

    def _chunk(self, text: str | None, reason: str | None, role: bool = False,
               output: RequestOutput | None = None) -> dict[str, Any]:
        logprobs = self._logprobs([output]) if output is not None else None
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason, "logprobs": logprobs}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
            if logprobs and logprobs["tokens"]:
                self.offset = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
        return self._object([choice], chunk=True)

    async def events(self, first: RequestOutput, rest: AsyncGenerator[RequestOutput, None],
                     include_usage: bool) -> AsyncIterator[str]:
        """SSE lines; a client that goes away cancels this and so aborts the request."""
        if self.chat:
            yield _sse(self._chunk("", None, role=True))
        last = first
        try:
            async for output in _chain(first, rest):
                last = output
                reason = output.finish_reason.value if output.finish_reason else None
                if output.text or reason or (self.names and output.logprobs):
                    yield _sse(self._chunk(output.text, reason, output=output))
        finally:
            await rest.aclose()
        if include_usage:
            yield _sse({**self._object([], chunk=True), "usage": self._usage(last)})
        yield "data: [DONE]\n\n"


async def _chain(first: RequestOutput, rest: AsyncIterator[RequestOutput]
                 ) -> AsyncIterator[RequestOutput]:
    yield first
    if not first.finished:
        async for output in rest:
            yield output


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def serve(model_dir: Path, *, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, config: EngineConfig | None = None,
          slots: KernelSlots | None = None, log_level: str = "info") -> None:
    """Load the checkpoint and serve it until interrupted."""
    engine = AsyncEngine(LLMEngine.from_pretrained(model_dir, config, slots))
    run_server(engine, create_app(engine, model_dir.resolve().name, api_key), host, port,
               log_level)


def run_server(engine: AsyncEngine, app: FastAPI, host: str, port: int,
               log_level: str = "info") -> None:
    """Serve ``app`` until SIGINT or SIGTERM, the engine stepping in this (the main)
    thread and uvicorn's event loop in a helper (:meth:`AsyncEngine.run_with`)."""
    uvicorn = import_extra("uvicorn", "engine", "serving a model")

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level))

    def shutdown() -> None:
        server.should_exit = True

    try:
        engine.run_with(server.serve, shutdown)
    except SystemExit as exc:  # uvicorn could not start (e.g. the port is taken)
        raise EngineError(f"the server on {host}:{port} did not start (see its log "
                          "above)") from exc
