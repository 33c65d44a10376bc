"""The jobs that run inside sandboxed workers, where candidate code executes.

Workers compute no verdicts: they run candidates and return raw outputs and timings. The
trusted parent compares the outputs with references it computed itself, so a candidate
that tampers with its own process cannot change how it is judged.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import threadpoolctl
import torch

from swarmfab.backends import Artifact, get_backend
from swarmfab.errors import CandidateError
from swarmfab.evaluation._bound import memory_stream
from swarmfab.kernels.allocator import fix_malloc_thresholds
from swarmfab.measure.timer import HostStopwatch, Stopwatch
from swarmfab.records import Candidate
from swarmfab.sandbox import Channel
from swarmfab.verify import gpu_probes, probes
from swarmfab.workloads import (
    Case,
    Forward,
    Inputs,
    Outputs,
    Workload,
    compulsory_bytes,
    get_workload,
)

__all__ = ["CaseRun", "Implementation", "ShapeRun", "case_runs", "run_cases",
           "serve_implementation", "tensors"]

_SETTLED = "outputs settled at return"
_CHANGED = "changed after the call returned"


@dataclass(frozen=True, slots=True)
class Implementation:
    """Something to time: a built candidate (``artifact``), a named baseline, or
    (``memory_stream``) an in-place update moving a case's compulsory bytes, the memory
    term of its roofline bound (:mod:`._bound`)."""

    name: str
    artifact: Artifact | None = None
    baseline: str | None = None
    # what the artifact was built from, so a worker on another machine can build it too
    source: Candidate | None = None
    memory_stream: bool = False

    def load(self, workload: Workload, *, fill_outputs: bool) -> Forward:
        if self.artifact is not None:
            backend = get_backend(self.artifact.backend)
            return backend.load(self.artifact, workload, fill_outputs=fill_outputs)
        assert self.baseline is not None, "an Implementation needs an artifact or a baseline"
        return workload.baselines()[self.baseline]


@dataclass(frozen=True, slots=True)
class CaseRun:
    """What a candidate did on one case: its outputs (or error) and what the probes saw.

    ``twin_outputs`` come from a second call whose fresh inputs (:func:`twin_case`) were
    written into the first call's tensors; ``findings`` maps a probe's check name to
    what it found (empty string: nothing wrong).
    """

    case: str
    outputs: dict[str, torch.Tensor] | None = None
    twin_outputs: dict[str, torch.Tensor] | None = None
    lean_outputs: dict[str, torch.Tensor] | None = None
    nudged_outputs: dict[str, torch.Tensor] | None = None
    error: str | None = None
    findings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShapeRun:
    """Timings of every implementation on one shape, plus the candidate's outputs."""

    shape: str
    seconds: dict[str, list[float]] = field(default_factory=dict)
    outputs: dict[str, torch.Tensor] | None = None
    timed_outputs: dict[str, torch.Tensor] | None = None
    error: str | None = None
    # minor page faults per call in each sample, per implementation (read from /proc)
    faults: dict[str, list[float]] = field(default_factory=dict)


# What the parent accepts back from these jobs (their answers are the candidate's word):
# the records, and a check that their fields hold the right kinds of values.

def tensors(value: object) -> bool:
    """``value`` is named outputs (or None)."""
    return value is None or (isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()))


def _strings(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def case_runs(value: object) -> bool:
    """``value`` is what :func:`run_cases` returns."""
    return isinstance(value, list) and all(
        isinstance(run, CaseRun) and isinstance(run.case, str) and _strings(run.findings)
        and all(tensors(o) for o in (run.outputs, run.twin_outputs, run.lean_outputs,
                                      run.nudged_outputs))
        and (run.error is None or isinstance(run.error, str)) for run in value)


def _call(workload: Workload, forward: Forward, inputs: Inputs) -> Outputs:
    with torch.no_grad():
        return workload.call(forward, inputs)


def _detached(outputs: Outputs) -> dict[str, torch.Tensor]:
    """A copy in host memory (the parent compares on the CPU)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in outputs.items()}


def on_device(inputs: Inputs, device: str) -> dict[str, torch.Tensor | float | None]:
    """The inputs where the implementations run (the same tensors on the CPU)."""
    return {name: value.to(device) if isinstance(value, torch.Tensor) else value
            for name, value in inputs.items()}


def run_cases(
    workload_name: str, artifact: Artifact, cases: list[Case], threads: int,
    device: str = "cpu",
) -> list[CaseRun]:
    """Run a candidate on every case under the probes; a case that raises is reported.

    On a CUDA device this job is the first to touch the device in its (fresh) process,
    and the allocator's cache is filled with NaN before the candidate loads, so an
    output it allocates but never writes cannot inherit an earlier answer."""
    torch.set_num_threads(threads)
    if device == "cuda":
        gpu_probes.poison_device_memory()
    workload = get_workload(workload_name)
    forward = get_backend(artifact.backend).load(artifact, workload, fill_outputs=True)
    runs: list[CaseRun] = []
    unsettled: dict[int, probes.Settling] = {}  # index in runs -> first outputs at return
    for case in cases:
        torch.set_num_threads(case.threads or threads)  # a case may name its own
        try:
            run, settling = _probe_case(workload, forward, case, device)
        except Exception as exc:  # the candidate's failure is data, not a worker failure
            runs.append(CaseRun(case.name, error=f"raised {type(exc).__name__}: {exc}"))
            continue
        finally:
            torch.set_num_threads(threads)
        if settling is not None:
            unsettled[len(runs)] = settling
        runs.append(run)
    # one pause after the last call settles every case's first outputs at once (each has
    # had at least that long since its call returned): the idle probe's, where it runs
    idle = bool(runs) and runs[-1].error is None
    probes.settle(list(unsettled.values()), pause=not idle)
    if idle:
        busy = probes.cpu_while_idle()
        runs[-1].findings["no work after return"] = (
            f"{busy * 1e3:.0f} ms of CPU in a {probes.IDLE_SECONDS * 1e3:.0f} ms pause after "
            "the last call returned" if busy > probes.IDLE_CPU_LIMIT else ""
        )
    for index, settling in unsettled.items():
        runs[index].findings[_SETTLED] = _names(settling.changed(), _CHANGED)
        runs[index] = dataclasses.replace(runs[index], outputs=_detached(settling.outputs))
    return runs


def _probe_case(workload: Workload, forward: Forward, case: Case, device: str
                ) -> tuple[CaseRun, probes.Settling | None]:
    """One case's calls under the probes. Its first call's outputs are read again after
    a pause ("outputs settled at return"), and those are the ones compared: here, where
    an output shares an input's memory (a state pool written in place, or an aliasing
    bug), since the probes refill the inputs next; otherwise by the caller, after every
    case (returned: a :class:`probes.Settling`)."""
    inputs = on_device(workload.make_inputs(case), device)
    keep = frozenset(workload.written_in_place(inputs).values())
    inputs = probes.laid_out(inputs, case.layout, keep)  # the values, laid out as named
    pristine = probes.snapshot(inputs)
    outputs = _call(workload, forward, inputs)
    plain = probes.not_plain_tensors(outputs)  # before anything reads them
    settling = probes.Settling(outputs)
    in_place = workload.written_in_place(inputs)
    aliased = probes.aliased_outputs(outputs, inputs, in_place)
    findings = {
        "outputs are plain tensors": "",  # every call's: found below
        "inputs unchanged": _names(probes.modified_inputs(pristine, inputs, in_place),
                                   "modified"),
        "outputs do not alias inputs": _names(aliased, "share memory with an input"),
        _SETTLED: "",  # found by the caller, unless settled below
    }
    first: dict[str, torch.Tensor] | None = None
    deferred: probes.Settling | None = settling
    if in_place or aliased:  # outputs in an input's memory, which the next calls refill
        probes.settle([settling])
        findings[_SETTLED] = _names(settling.changed(), _CHANGED)
        first, deferred = _detached(outputs), None
    children = probes.child_processes()
    findings["no processes left running"] = (
        f"{len(children)} child process(es) still running" if children else ""
    )
    # the battery's cases leave out the calls that catch caches and missing optional
    # outputs (the fast corpus, which every candidate met first, makes them)
    full = case.origin != probes.BATTERY
    with torch.no_grad():
        lean = workload.call_lean(forward, inputs) if full else None
    twin = workload.make_inputs(probes.twin_case(case))
    probes.write_into(inputs, twin)  # same tensors, new values
    twin_raw = _call(workload, forward, inputs)
    twin_outputs = _detached(twin_raw)
    nudged_raw: Outputs = {}
    nudged_outputs = None
    if full:
        probes.write_into(inputs, probes.nudged(twin, probes.nudge_seed(case)))  # same buffers
        nudged_raw = _call(workload, forward, inputs)
        nudged_outputs = _detached(nudged_raw)
    # every call's outputs, the optional outputs left out too
    plain += tuple(name for raw in (lean or {}, twin_raw, nudged_raw)
                   for name in probes.not_plain_tensors(raw) if name not in plain)
    findings["outputs are plain tensors"] = _names(
        plain, "not exactly torch.Tensor (a subclass can compute when read, after the "
        "clock stops)")
    again = _detached(_call(workload, forward, probes.laid_out(
        on_device(probes.snapshot(twin), device), case.layout, keep)))
    same = all(torch.equal(again[n], twin_outputs[n]) for n in twin_outputs)
    findings["deterministic"] = "" if same else "the same inputs gave different outputs"
    findings["parameters and buffers unchanged"] = _names(
        workload.changed_state(forward, inputs), "changed by the calls")
    return CaseRun(case.name, outputs=first, twin_outputs=twin_outputs,
                   lean_outputs=None if lean is None else _detached(lean),
                   nudged_outputs=nudged_outputs, findings=findings), deferred


def _names(names: tuple[str, ...], what: str) -> str:
    return f"{', '.join(names)} {what}" if names else ""


def serve_implementation(
    channel: Channel, workload_name: str, implementation: Implementation,
    cases: list[Case], threads: int, device: str = "cpu",
) -> None:
    """Serve one implementation's calls to the conductor (``_conductor.benchmark``),
    which times them from its own process. Requests, each answered once:

    - ``("case", index, pick)``: take ``cases[index]``'s inputs. With ``pick`` (every
      session gets the same, so all carry the same memory into their timed calls): the
      answer is the outputs of a sentinel-filled call, and the ``pick``-th call from now
      runs on a twin case's values and is kept;
    - ``("run", n)``: ``n`` calls, untimed (warm-up, or the switch before a sample);
    - ``("evict", round)``: evict the caches (cold samples);
    - ``("sample", n)``: ``n`` calls; the answer is this process's own seconds per call
      (the conductor's clock decides on a CPU; CUDA events, from here, on a device);
    - ``("kept",)``: the kept call's outputs; ``("quit",)`` ends the job.

    Each answer is ``("ok", value)``, or ``("raised", message)`` when the
    implementation raised (the conductor reports that shape as failed).
    """
    _pin(threads)
    fix_malloc_thresholds()
    workload = get_workload(workload_name)
    stopwatch = _stopwatch(device)
    flushes: dict[int, HostStopwatch] = {}
    call: Callable[[], object] = lambda: None  # noqa: E731  (no case taken yet)
    spy: _Spy | None = None
    while True:
        request = channel.receive()
        kind = request[0]
        if kind == "quit":
            return
        answer: object
        try:
            with torch.no_grad():
                if kind == "case":
                    answer, call, spy = _take_case(workload, implementation, cases[request[1]],
                                                   request[2], device)
                elif kind == "run":
                    for _ in range(request[1]):
                        call()
                    answer = None
                elif kind == "evict":  # ("evict", round, bytes): bytes for the host's caches
                    if device == "cuda":
                        stopwatch.evict(request[1])
                    else:
                        flushes.setdefault(request[2], HostStopwatch(request[2])).evict(
                            request[1])
                    answer = None
                elif kind == "sample":
                    answer = stopwatch.seconds(call, request[1])
                elif kind == "kept":
                    answer = spy.kept if spy is not None else None
                else:
                    raise ValueError(f"unknown request {kind!r}")
        except Exception as exc:  # the implementation's failure is data
            channel.reply(("raised", f"raised {type(exc).__name__}: {exc}"))
            continue
        channel.reply(("ok", answer))


def _take_case(
    workload: Workload, implementation: Implementation, case: Case, pick: int | None,
    device: str,
) -> tuple[dict[str, torch.Tensor] | None, Callable[[], object], _Spy | None]:
    """The calls of one case; with ``pick``, the sentinel-filled outputs and the spy."""
    if implementation.memory_stream:
        # an in-place update of the case's compulsory bytes (torch's own threads, as
        # many as the implementations have)
        nbytes = compulsory_bytes(workload, case.shape, case.dtype) or 0.0
        return None, memory_stream(nbytes, device), None
    inputs = on_device(workload.make_inputs(case), device)
    outputs = None
    if pick is not None:
        forward = implementation.load(workload, fill_outputs=True)
        first = _call(workload, forward, inputs)
        lazy = probes.not_plain_tensors(first)
        if lazy:  # its calls would be timed without their work
            raise CandidateError(f"{', '.join(lazy)}: an output must be exactly "
                                 "torch.Tensor (a subclass can compute when read)")
        outputs = _detached(first)
    call = _bind(workload, implementation.load(workload, fill_outputs=False), inputs)
    if pick is None:
        return None, call, None
    twin = on_device(workload.make_inputs(probes.twin_case(case)), device)
    spy = _Spy(call, pick, inputs, twin)
    return outputs, spy, spy


def _stopwatch(device: str) -> Stopwatch:
    """CUDA events with an L2 flush on a GPU; the host clock otherwise."""
    if device != "cuda":
        return HostStopwatch()
    from swarmfab.measure.gpu import DeviceStopwatch

    return DeviceStopwatch()


class _Spy:
    """Passes calls through; the ``pick``-th runs on the twin case's values and is kept.

    The twin values are written into the very input tensors and put back afterwards, so
    a kernel that returns stale results (recycled memory, a cache) gives the old answer
    to the new question. One sample pays for two input copies; the median absorbs it.
    """

    def __init__(self, call: Callable[[], object], pick: int, inputs: Inputs, twin: Inputs):
        self.call, self.pick, self.count = call, pick, 0
        self.inputs, self.twin, self.original = inputs, twin, probes.snapshot(inputs)
        self.kept: dict[str, torch.Tensor] | None = None

    def __call__(self) -> object:
        self.count += 1
        if self.count != self.pick:
            return self.call()
        probes.write_into(self.inputs, self.twin)
        result = self.call()
        lazy = probes.not_plain_tensors(result)  # type: ignore[arg-type]
        if lazy:  # the timed calls returned without their work
            raise CandidateError(f"a timed call's {', '.join(lazy)}: an output must be "
                                 "exactly torch.Tensor (a subclass can compute when read)")
        # copied now: an output written in place (a state pool) changes with the next call
        self.kept = _detached(result)  # type: ignore[arg-type]
        probes.write_into(self.inputs, self.original)
        return result


def _bind(workload: Workload, forward: Forward, inputs: Inputs) -> Callable[[], object]:
    return lambda: workload.call(forward, inputs)


def _pin(threads: int) -> None:
    """Use exactly ``threads`` threads (torch, OpenMP and BLAS pools), pinned to as many
    of the allowed cores."""
    torch.set_num_threads(threads)
    threadpoolctl.threadpool_limits(limits=threads)
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > threads:
        os.sched_setaffinity(0, allowed[:threads])
