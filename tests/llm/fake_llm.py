"""A scripted chat-model server on loopback, speaking the real wire protocols.

``FakeLLM`` is a real HTTP server (stdlib ``ThreadingHTTPServer`` in a thread) that
implements ``POST /v1/chat/completions`` (OpenAI: a JSON body, or server-sent events
when the request asks to stream) and ``POST /v1/messages`` (Anthropic). Each request
takes the next step of a script: a reply, an HTTP error (429 with Retry-After, 500...),
a malformed body, or a hang. Every request is kept, headers and JSON body, so tests
can check exactly what a model was shown and which key was sent.

Run as a script (``python tests/llm/fake_llm.py SCRIPT.json``) it serves a JSON script
and prints its port, for trying the command line by hand.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """A model answer. ``usage=False``: the server reports no token counts."""

    text: str
    usage: bool = True
    prompt_tokens: int = 1200
    completion_tokens: int = 300


@dataclass(frozen=True)
class Status:
    """An HTTP error, e.g. ``Status(429, headers={"retry-after": "0"})``."""

    code: int
    body: str = '{"error": {"message": "scripted error", "type": "server_error"}}'
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """A body sent as is with status 200: malformed JSON, a reply without choices..."""

    body: str
    content_type: str = "application/json"


@dataclass(frozen=True)
class Hang:
    """Accept the request and answer nothing for ``seconds`` (the client must time out)."""

    seconds: float = 30.0


Step = Reply | Status | Raw | Hang
Scripted = Step | Callable[[dict[str, Any]], Step]


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """Every message's text, joined: what the model was shown."""
        parts = [self.body.get("system", "")] if isinstance(self.body.get("system"), str) else []
        parts += [str(m.get("content", "")) for m in self.body.get("messages", [])]
        return "\n".join(parts)


class FakeLLM:
    """Start with ``with FakeLLM([...]) as llm:``; ``llm.base_url`` ends in ``/v1``."""

    def __init__(self, script: list[Scripted] | None = None, default: Step | None = None):
        self.script: list[Scripted] = list(script or [])
        self.default = default or Reply("")
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *steps: Scripted) -> None:
        with self._lock:
            self.script.extend(steps)

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> Step:
        with self._lock:
            scripted = self.script.pop(0) if self.script else self.default
        return scripted(body) if callable(scripted) else scripted

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()},
                                  body)
                with fake._lock:
                    fake.requests.append(request)
                if self.path.rstrip("/").endswith(("/chat/completions", "/messages")):
                    self._answer(fake._next(body), body)
                else:
                    self._send(404, '{"error": {"message": "no such route"}}')

            def _answer(self, step: Step, body: dict[str, Any]) -> None:
                anthropic = self.path.rstrip("/").endswith("/messages")
                if isinstance(step, Hang):
                    fake._stop.wait(step.seconds)
                    self.close_connection = True
                    return
                if isinstance(step, Status):
                    self._send(step.code, step.body, headers=step.headers)
                elif isinstance(step, Raw):
                    self._send(200, step.body, step.content_type)
                elif anthropic:
                    self._send(200, json.dumps(_anthropic_message(step, body)))
                elif body.get("stream"):
                    self._stream(step, body)
                else:
                    self._send(200, json.dumps(_completion(step, body)))

            def _send(self, code: int, text: str, content_type: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, step: Reply, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.close_connection = True
                self.end_headers()
                for chunk in _chunks(step, body):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler


def _usage(step: Reply) -> dict[str, int]:
    return {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens}


def _completion(step: Reply, body: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": step.text}}],
    }
    if step.usage:
        reply["usage"] = _usage(step)
    return reply


def _chunks(step: Reply, body: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", "fake")}
    pieces = [step.text[i:i + 40] for i in range(0, len(step.text), 40)] or [""]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": p},
                                    "finish_reason": None}]} for p in pieces]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    wants_usage = (body.get("stream_options") or {}).get("include_usage")
    if step.usage and wants_usage:
        chunks.append({**base, "choices": [], "usage": _usage(step)})
    return chunks


def _anthropic_message(step: Reply, body: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant",
            "model": body.get("model", "fake"), "stop_reason": "end_turn",
            "stop_sequence": None, "content": [{"type": "text", "text": step.text}],
            "usage": {"input_tokens": step.prompt_tokens,
                      "output_tokens": step.completion_tokens}}


if __name__ == "__main__":  # serve a JSON script of replies by hand: [{"text": ...}, ...]
    with open(sys.argv[1]) as handle:
        steps: list[Scripted] = [Reply(**item) for item in json.load(handle)]
    with FakeLLM(steps) as served:
        print(served.base_url, flush=True)
        threading.Event().wait()
