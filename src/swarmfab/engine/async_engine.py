"""The engine on a background thread, with an asyncio face for the HTTP server.

The event loop never waits for a model step: new requests and aborts go into a queue
that the engine thread drains between steps, and outputs come back to each request's
``asyncio.Queue`` through ``call_soon_threadsafe``. When a consumer stops listening (a
client disconnects), its request is aborted and its memory freed at the next step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from swarmfab.engine.engine import LLMEngine
from swarmfab.engine.request import Request, RequestOutput, SamplingParams

__all__ = ["AsyncEngine"]


@dataclass(frozen=True, slots=True)
class _Listener:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput | BaseException]


class AsyncEngine:
    """Owns the engine thread. ``start`` before use, ``stop`` at shutdown."""

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._wakeup = threading.Condition()
        self._incoming: list[Request] = []
        self._aborts: list[str] = []
        self._listeners: dict[str, _Listener] = {}
        self._live: dict[str, Request] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wakeup:
            self._stopped = True
            self._wakeup.notify()
        self._thread.join(timeout=10)

    async def generate(self, prompt_ids: list[int], params: SamplingParams,
                       request_id: str | None = None) -> AsyncGenerator[RequestOutput, None]:
        """Outputs of one request as they come; raises EngineError before queueing if
        the request cannot be served. Closing the iterator early aborts the request."""
        request = self.engine.make_request(prompt_ids, params, request_id)
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._listeners[request.id] = _Listener(asyncio.get_running_loop(), queue)
        with self._wakeup:
            self._incoming.append(request)
            self._wakeup.notify()
        finished = False
        try:
            while not finished:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self._listeners.pop(request.id, None)
            if not finished:
                with self._wakeup:
                    self._aborts.append(request.id)
                    self._wakeup.notify()

    # -- the engine thread ---------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not (self._stopped or self._incoming or self._aborts
                           or self.engine.has_work()):
                    self._wakeup.wait()
                if self._stopped:
                    return
                incoming, self._incoming = self._incoming, []
                aborts, self._aborts = self._aborts, []
            for request in incoming:
                self._live[request.id] = request
                self.engine.add(request)
            for request_id in aborts:
                if request_id in self._live:
                    self.engine.abort(self._live.pop(request_id))
            try:
                outputs = self.engine.step()
            except Exception as exc:  # the engine is broken: tell every waiting client
                self._fail_all(exc)
                continue
            for output in outputs:
                self._deliver(output.request_id, output)
                if output.finished:
                    self._live.pop(output.request_id, None)
            time.sleep(0)  # let the event loop stream this step before the next one

    def _deliver(self, request_id: str, item: RequestOutput | BaseException) -> None:
        listener = self._listeners.get(request_id)
        if listener is not None:
            listener.loop.call_soon_threadsafe(listener.queue.put_nowait, item)

    def _fail_all(self, exc: Exception) -> None:
        for request_id, request in list(self._live.items()):
            self.engine.abort(request)
            self._deliver(request_id, exc)
        self._live.clear()
