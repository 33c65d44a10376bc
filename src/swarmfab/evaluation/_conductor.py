"""Side-by-side timing with every implementation in a process of its own, timed from
outside all of them.

Each implementation (the candidate, its incumbent, the baselines beside them) is served
by a sandboxed session (``_worker.serve_implementation``) pinned to the same cores. The
conductor, in the evaluator's process, runs the usual protocol
(:func:`~swarmfab.measure.time_interleaved`: warm-up, rounds in rotating order, an
untimed switch call before each sample, adaptive stopping) and reads the clock itself
around each sample's request. So:

- nothing an implementation does to its own process (a thread count, a global flag, a
  patched function or clock) reaches another implementation or the clock;
- a sample is the round trip of one request, less the pipe's own round trip (the
  fastest session's median echo, measured before timing: a session can make its own
  echo slower, never the pipe faster); the minor page faults the session's process took
  meanwhile are read from ``/proc`` too (a fresh 32 MiB output faults 8,192 pages, a
  quarter of a KDA prefill call on a VM), so a table can say where a call's time went;
- every session is asked the same requests in the same order, the checked one's
  answers are merely the ones kept: a process's allocation history decides what its
  calls pay in page faults (glibc's malloc moves its mmap threshold as blocks are
  freed), and an A/A comparison of one kernel against itself at B1 T8192 H8 read
  0.84x [0.78, 0.86] when only the checked session had made the sentinel-filled call
  and held the twin inputs (no page faults a call, against 14,500 in the other); and
  every session fixes glibc's thresholds where a long-running process's end up, since
  two implementations never allocate alike (``kernels.allocator.fix_malloc_thresholds``);
- before each sample the conductor waits until no thread of any other session is
  running (an OpenMP pool spins for a few milliseconds after its last region), for at
  most 50 ms: on a loaded host a spinning thread may wait that long for a core. A
  session still running at that limit before most of the others' samples is working
  while they are timed, and the shape fails, naming it.

On a CUDA device the samples are the session's own CUDA-event timings: a device's
time cannot be read from another process.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmfab.backends import Artifact
from swarmfab.evaluation._worker import Implementation, ShapeRun, tensors
from swarmfab.measure import TimingPolicy, time_interleaved
from swarmfab.sandbox import Session
from swarmfab.workloads import Case

__all__ = ["Raised", "benchmark", "minor_faults", "staged"]

_clock = time.perf_counter
_ECHOES = 15
_QUIET_LIMIT_S = 0.05
# a session found running at the limit before this share of the others' samples (and
# at least _BUSY_MIN_SAMPLES of them) fails the shape
_BUSY_SHARE, _BUSY_MIN_SAMPLES = 0.75, 4
_SECRET_CHOICE = random.SystemRandom()


class Raised(Exception):
    """An implementation raised, or would not let the others be timed: the shape fails."""


def benchmark(
    plan: list[tuple[Case, list[Implementation]]], policy: TimingPolicy, checked: str | None,
    device: str, start: Callable[[Implementation, list[Case]], Session],
) -> list[ShapeRun]:
    """Time each entry's implementations side by side (the first is the reference of the
    ratios). ``start(implementation, cases)`` starts its session over the plan's cases.
    When ``checked`` names an implementation, its outputs are returned as well: from a
    sentinel-filled call before timing, and from a timed call picked at random, run on
    a twin case's values (every session makes those calls: only the checked one's
    outputs are kept). A session that ends early raises
    :class:`~swarmfab.sandbox.SessionEnded`."""
    cases = [case for case, _ in plan]
    sessions: dict[str, Session] = {}
    try:
        for _, implementations in plan:
            for implementation in implementations:
                if implementation.name not in sessions:
                    sessions[implementation.name] = start(implementation, cases)
        return [_shape(index, case, {i.name: sessions[i.name] for i in implementations},
                       policy, checked, device)
                for index, (case, implementations) in enumerate(plan)]
    finally:
        for session in sessions.values():
            session.close()


def _shape(index: int, case: Case, sessions: dict[str, Session], policy: TimingPolicy,
           checked: str | None, device: str) -> ShapeRun:
    label = case.shape.label
    # a call every implementation is sure to make: a long one gets a single warm-up call
    # and one call per round (TimingPolicy.long_call_s)
    pick = (_SECRET_CHOICE.randint(2, 1 + min(policy.min_rounds, policy.long_call_min_rounds))
            if checked in sessions else None)
    for session in sessions.values():  # all load (and compile) at once, alike (module doc)
        session.send(("case", index, pick))
    replies = {name: session.reply() for name, session in sessions.items()}  # all of them
    try:
        taken = {name: _value(reply) for name, reply in replies.items()}
        overhead = 0.0 if device == "cuda" else min(_echo(s) for s in sessions.values())
        watch = _RemoteStopwatch(sessions, overhead, policy.flush_bytes, device)
        calls: dict[str, Callable[[], object]] = {
            name: _RemoteCall(name, session) for name, session in sessions.items()}
        seconds = time_interleaved(calls, policy, reference=next(iter(sessions)),
                                   stopwatch=watch)
        watch.check_nobody_kept_running()
        kept = ({name: _value(session.ask(("kept",))) for name, session in sessions.items()}
                if pick is not None else {})
        timed = kept.get(checked) if checked else None
        outputs = taken.get(checked) if checked else None
        if not (tensors(outputs) and tensors(timed)):
            raise Raised(f"{checked}'s session answered outputs that are not named tensors")
    except Raised as exc:
        return ShapeRun(label, error=str(exc))
    return ShapeRun(label, seconds=seconds, outputs=outputs, timed_outputs=timed,
                    faults=watch.faults)


def _value(reply: Any) -> Any:
    """The value of a well-formed ``("ok", value)`` reply; a ``("raised", message)``
    reply raises :class:`Raised`."""
    if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "ok":
        return reply[1]
    if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "raised":
        raise Raised(str(reply[1]))
    raise Raised(f"an implementation's session answered {type(reply).__name__}, not a reply")


def _echo(session: Session) -> float:
    """The median round trip of a request that runs nothing."""
    trips = []
    for _ in range(_ECHOES):
        begin = _clock()
        _value(session.ask(("run", 0)))
        trips.append(_clock() - begin)
    return statistics.median(trips)


class _RemoteCall:
    """One untimed call of an implementation, in its session."""

    def __init__(self, name: str, session: Session):
        self.name, self.session = name, session

    def __call__(self) -> None:
        _value(self.session.ask(("run", 1)))


class _RemoteStopwatch:
    """Samples timed by this process's clock around a session's calls."""

    def __init__(self, sessions: dict[str, Session], overhead: float, flush_bytes: int,
                 device: str):
        self.sessions, self.overhead, self.device = sessions, overhead, device
        self.flush_bytes = flush_bytes
        self.cold = device == "cuda" or flush_bytes > 0
        self._round = 0
        # per session: the others' samples, and those before which it was still running
        self._others_timed = dict.fromkeys(sessions, 0)
        self._running_at_limit = dict.fromkeys(sessions, 0)
        # per session: minor page faults per call in each sample (where /proc tells)
        self.faults: dict[str, list[float]] = {name: [] for name in sessions}

    def evict(self, round_index: int) -> None:
        self._round = round_index  # done by the session about to be timed

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        assert isinstance(call, _RemoteCall)
        if self.cold:
            _value(call.session.ask(("evict", self._round, self.flush_bytes)))
        self._wait_until_quiet(call.name)
        faults = minor_faults(call.session.pid)
        begin = _clock()
        own = _value(call.session.ask(("sample", repeats)))
        elapsed = _clock() - begin
        after = minor_faults(call.session.pid)
        if faults is not None and after is not None:
            self.faults[call.name].append((after - faults) / repeats)
        if self.device == "cuda":
            if not (isinstance(own, float) and math.isfinite(own) and own > 0):
                raise Raised(f"{call.name}'s session reported {own!r} seconds")
            return own
        return max(elapsed - self.overhead, 1e-9) / repeats

    def _wait_until_quiet(self, timed: str) -> None:
        for name in self.sessions:
            self._others_timed[name] += name != timed
        deadline = _clock() + _QUIET_LIMIT_S
        while True:
            busy = [name for name, session in self.sessions.items()
                    if name != timed and _running(session.pid)]
            if not busy:
                return
            if _clock() > deadline:
                for name in busy:
                    self._running_at_limit[name] += 1
                return
            time.sleep(0.0002)

    def check_nobody_kept_running(self) -> None:
        """Raise :class:`Raised` for a session that kept a thread running while the
        others were timed (see the module's docstring)."""
        for name, count in self._running_at_limit.items():
            others = self._others_timed[name]
            if count >= _BUSY_MIN_SAMPLES and count >= _BUSY_SHARE * others:
                raise Raised(f"{name}'s process kept running while the others were timed "
                             f"(still running {_QUIET_LIMIT_S * 1e3:.0f} ms after its call "
                             f"before {count} of their {others} samples)")


def minor_faults(pid: int | None) -> int | None:
    """Minor page faults process ``pid`` has taken, all its threads together (None where
    /proc cannot tell)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[7]) if len(fields) > 7 and fields[7].isdigit() else None


def _running(pid: int | None) -> bool:
    """Whether any thread of process ``pid`` is running or runnable (state R); False
    where /proc cannot tell."""
    if pid is None:
        return False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2:][:1] == "R":
            return True
    return False


def staged(
    plan: list[tuple[Case, list[Implementation]]],
) -> tuple[list[tuple[Case, list[Implementation]]], dict[str, Path]]:
    """The plan with every artifact moved into the job's directory, and what to copy there."""
    stage: dict[str, Path] = {}
    renamed: dict[Path, Artifact] = {}

    def local(impl: Implementation) -> Implementation:
        if impl.artifact is None:
            return impl
        source = impl.artifact.path
        if source not in renamed:
            relative = Path("artifacts") / str(len(renamed)) / source.name
            stage[str(relative)] = source
            renamed[source] = Artifact(impl.artifact.backend, relative)
        return dataclasses.replace(impl, artifact=renamed[source])

    return [(case, [local(impl) for impl in impls]) for case, impls in plan], stage

