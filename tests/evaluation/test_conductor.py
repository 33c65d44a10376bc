"""The conductor treats every session alike: the checked implementation's answers are
merely the ones kept. A process's allocation history decides what its calls pay in page
faults, so a session asked for more (a sentinel-filled call, twin inputs held, a kept
call) than its rival was timed in another memory state: an A/A comparison of one C
kernel against itself read 0.84x at B1 T8192 H8."""

from __future__ import annotations

import mmap
import os
from typing import Any

import pytest
import torch

from swarmfab.evaluation import Implementation
from swarmfab.evaluation._conductor import benchmark, minor_faults
from swarmfab.measure import TimingPolicy
from swarmfab.workloads import Case, Shape

QUICK = TimingPolicy(min_rounds=3, max_rounds=4, max_seconds=1.0)


class _ScriptedSession:
    """Answers the conductor's requests as ``serve_implementation`` does and writes them
    down; its outputs are its name, so the test can tell whose were kept."""

    pid = None  # /proc cannot tell: nobody is ever found running

    def __init__(self, name: str, value: float):
        self.name, self.value = name, value
        self.requests: list[tuple[Any, ...]] = []
        self._pending: tuple[Any, ...] | None = None

    def send(self, request: tuple[Any, ...]) -> None:
        self.requests.append(request)
        self._pending = request

    def reply(self) -> Any:
        request, self._pending = self._pending, None
        assert request is not None
        if request[0] == "case":
            return ("ok", {"o": torch.full((2,), self.value)} if request[2] else None)
        if request[0] == "kept":
            return ("ok", {"o": torch.full((2,), -self.value)})
        if request[0] == "sample":
            return ("ok", 1e-3)
        return ("ok", None)

    def ask(self, request: tuple[Any, ...]) -> Any:
        self.send(request)
        return self.reply()

    def close(self) -> None:
        self.requests.append(("closed",))


def _conduct(checked: str | None) -> tuple[dict[str, _ScriptedSession], list[Any]]:
    shapes = [Shape(1, 64, 2, 2, 16, 16), Shape(2, 32, 2, 2, 16, 16)]
    cases = [Case(f"target {s.label}", s, seed=n) for n, s in enumerate(shapes)]
    names = {"incumbent": 1.0, "torch-chunked": 2.0, "candidate": 3.0}
    implementations = [Implementation(name, baseline=name) for name in names]
    sessions: dict[str, _ScriptedSession] = {}

    def start(implementation: Implementation, _cases: list[Case]) -> _ScriptedSession:
        session = _ScriptedSession(implementation.name, names[implementation.name])
        sessions[implementation.name] = session
        return session

    runs = benchmark([(case, implementations) for case in cases], QUICK, checked, "cpu",
                     start)  # type: ignore[arg-type]
    return sessions, runs


@pytest.mark.parametrize("checked", ["candidate", "incumbent", None])
def test_every_session_is_asked_the_same_requests_in_the_same_order(
        checked: str | None) -> None:
    sessions, runs = _conduct(checked)
    asked = [session.requests for session in sessions.values()]
    assert all(requests == asked[0] for requests in asked), (
        "the sessions were asked different things: "
        + "; ".join(f"{name}: {s.requests}" for name, s in sessions.items()))
    cases = [request for request in asked[0] if request[0] == "case"]
    assert len(cases) == 2 and asked[0][-1] == ("closed",)
    if checked is None:  # nothing to check: no sentinel call, no kept call
        assert all(request[2] is None for request in cases)
        assert ("kept",) not in asked[0]
        assert all(run.outputs is None and run.timed_outputs is None for run in runs)


def test_only_the_checked_implementations_outputs_come_back() -> None:
    sessions, runs = _conduct("torch-chunked")
    picks = {request[2] for request in sessions["candidate"].requests if request[0] == "case"}
    assert None not in picks  # a call picked for the twin values on every shape
    for run in runs:
        assert run.error is None
        assert set(run.seconds) == set(sessions)
        assert torch.equal(run.outputs["o"], torch.full((2,), 2.0))
        assert torch.equal(run.timed_outputs["o"], torch.full((2,), -2.0))


def test_a_process_s_minor_faults_count_the_fresh_pages_it_touches() -> None:
    before = minor_faults(os.getpid())
    region = mmap.mmap(-1, 8 << 20)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    for offset in range(0, len(region), mmap.PAGESIZE):
        region[offset] = 1
    after = minor_faults(os.getpid())
    region.close()
    assert before is not None and after is not None
    assert after - before >= (8 << 20) // mmap.PAGESIZE
    assert minor_faults(None) is None
