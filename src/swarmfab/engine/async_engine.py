"""The engine stepping on its own thread, with an asyncio face for the HTTP server.

The event loop never waits for a model step: new requests and aborts go into a queue
that the engine thread drains between steps, and outputs come back to each request's
``asyncio.Queue`` through ``call_soon_threadsafe``. When a consumer stops listening (a
client disconnects), its request is aborted and its memory freed at the next step.

Which thread steps matters: torch's OpenMP intra-op threads run a step faster when the
process's main thread drives them. On a 2-core Xeon, the 153M model at 8 sequences made
67 output tokens/s stepping on the main thread with the event loop on a helper thread,
56 the other way round, and 72 with no event loop at all (medians of 4 interleaved runs
in one process). So :meth:`AsyncEngine.run_with` gives the engine the calling (main)
thread and the event loop a helper, and ``swarmfab serve`` uses it; :meth:`start` (a
background engine thread) remains for embedding the engine in a running event loop.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from swarmfab.engine.engine import LLMEngine
from swarmfab.engine.request import Request, RequestOutput, SamplingParams

__all__ = ["AsyncEngine"]

T = TypeVar("T")


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
        self._driven = False  # run_with steps in the caller's thread instead
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def start(self) -> None:
        """Step on a background thread (a no-op while :meth:`run_with` drives it)."""
        if not self._driven:
            self._thread.start()

    def stop(self) -> None:
        with self._wakeup:
            self._stopped = True
            self._wakeup.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run_with(self, main: Callable[[], Coroutine[Any, Any, T]],
                 shutdown: Callable[[], None] | None = None) -> T:
        """Run ``main()`` on an event loop in a helper thread while the engine steps in
        the calling thread; return its result once it ends (the engine stops then).

        Called from the main thread with ``shutdown``, SIGINT and SIGTERM call it (it
        must only ask ``main`` to end, e.g. set a server's exit flag) instead of their
        defaults, until this returns."""
        self._driven = True
        outcome: list[Any] = []

        def loop() -> None:
            try:
                outcome.append(asyncio.run(main()))
            except BaseException as exc:  # handed to the calling thread below
                outcome.append(exc)
            finally:
                self.stop()

        previous = {}
        if shutdown is not None and threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, lambda *_: shutdown())
                        for sig in (signal.SIGINT, signal.SIGTERM)}
        helper = threading.Thread(target=loop, name="event-loop", daemon=True)
        helper.start()
        ended = False
        try:
            self._run()
            ended = True
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if shutdown is not None:
                shutdown()
            if ended or shutdown is not None:  # else (Ctrl-C) main may never end
                helper.join(timeout=30)
        if not outcome:
            raise RuntimeError("the event loop did not end within 30 s of the engine")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

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
        self.engine.use_threads()
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
            self._deliver([(output.request_id, output) for output in outputs])
            for output in outputs:
                if output.finished:
                    self._live.pop(output.request_id, None)
            time.sleep(0)  # let the event loop stream this step before the next one

    def _deliver(self, items: list[tuple[str, RequestOutput | BaseException]]) -> None:
        """Hand a step's outputs to their listeners: one wake-up per event loop per step,
        not one per token (each wake-up costs the engine thread a GIL hand-over)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Any], Any]]] = {}
        for request_id, item in items:
            listener = self._listeners.get(request_id)
            if listener is not None:
                by_loop.setdefault(listener.loop, []).append((listener.queue, item))
        for loop, batch in by_loop.items():
            loop.call_soon_threadsafe(_put_all, batch)

    def _fail_all(self, exc: Exception) -> None:
        for request in self._live.values():
            self.engine.abort(request)
        self._deliver([(request_id, exc) for request_id in self._live])
        self._live.clear()


def _put_all(batch: list[tuple[asyncio.Queue[Any], Any]]) -> None:
    for queue, item in batch:
        queue.put_nowait(item)
