"""A run's setup: references, host peaks and baseline timings, before any candidate runs.

Before spending anything the setup estimates its own cost: the workload names a cheap
probe shape for each target (for the delta rule, the first 64 tokens), and the reference
and every baseline are timed on it in this process and scaled up. A budget whose setup
would take more than :data:`SETUP_SHARE` of it is refused at once, with the estimate and
what to lower. (The closing table adapts to the time left, so it is only reported.) A host
whose cores other processes keep busy is named: its timings are slow and noisy.

The baselines only pick the first incumbent on each shape (the fastest); the closing
table times them side by side with the champion. So the probe's scaled times choose the
incumbent where no earlier run on this host measured the shape. Each baseline's time per
call is stored (per workload, shape, baseline, device, host fingerprint and torch
version): the probe's as an estimate, the closing table's median as a measurement that
estimates never replace; a later run reads them instead of probing. A workload without a
probe shape has its baselines timed in sandboxed jobs, stored the same way. Host peaks
are stored per host fingerprint. References are computed every run (the target inputs
come from the run's secret seeds), by the workload's compiled reference. Each step that
takes more than a moment says so when it starts (``computing references 3/5 ...``).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swarmfab.errors import DeadlineError, GoalError
from swarmfab.evaluation import Evaluator, Implementation, SideBySide
from swarmfab.goal import Goal
from swarmfab.knowledge import Store
from swarmfab.measure import TimingPolicy
from swarmfab.measure.roofline import host_fingerprint
from swarmfab.swarm.budget import SETUP_SHARE, Budget
from swarmfab.swarm.hosts import host_peaks, peaks_known
from swarmfab.workloads import Case, Inputs

__all__ = ["CALIBRATION", "FINAL_MIN_ROUNDS", "Calibration", "Setup", "SetupEstimate",
           "busy_cores"]

# baselines only pick the first incumbent: one round (an untimed and a timed call) is
# enough where a call is long; short calls get a few rounds within a second
CALIBRATION = TimingPolicy(min_rounds=1, max_rounds=5, max_seconds=1.0, warmup_calls=0)
FINAL_MIN_ROUNDS = 2  # the closing table's samples per implementation, at the least
PEAKS_ESTIMATE_S = 6.0  # measuring the host's peaks (FMA loops, GEMM, copy)
JOB_ESTIMATE_S = 1.0  # starting one sandboxed job and staging its inputs
# timing one shape's baselines in a job on a GPU, where nothing is probed: the job starts
# CUDA and fla's Triton kernels (13 and 15 s a shape on an H200, fla's cache warm)
DEVICE_BASELINES_S = 15.0
COMPILE_KEY = "(a job that compiles)"  # stored beside the baselines: its wall seconds


@dataclass(frozen=True, slots=True)
class Calibration:
    """The baselines as timed (or recalled) on each target shape."""

    names: tuple[str, ...]
    fastest: dict[str, str]  # shape label -> the fastest baseline that may be incumbent
    seconds: dict[str, dict[str, float]]  # shape label -> baseline -> median seconds
    inputs_s: dict[str, float] = field(default_factory=dict)  # drawing a shape's inputs
    # per shape: a job's seconds before it times anything when an implementation compiles
    # at its first call (torch.compile): the calibration job's wall time, measured
    compile_s: dict[str, float] = field(default_factory=dict)
    compiling: frozenset[str] = frozenset()  # the baselines that compile at first call


@dataclass(frozen=True, slots=True)
class SetupEstimate:
    """Seconds the setup is expected to take per target shape; the closing table's
    fewest rounds (fastest baseline only) for information; each baseline's estimated
    time per call on each shape."""

    references_s: dict[str, float]
    peaks_s: float
    closing_s: dict[str, float]
    calls: dict[str, dict[str, float]]  # shape -> baseline -> seconds per call (scaled)
    inputs_s: dict[str, float]  # drawing a shape's inputs once
    baselines_s: dict[str, float] = field(default_factory=dict)  # timed in jobs (a device)

    @property
    def setup_s(self) -> float:
        return (sum(self.references_s.values()) + self.peaks_s
                + sum(self.baselines_s.values()))

    def costliest(self) -> str:
        return max(self.references_s, key=lambda label: self.references_s[label]
                   + self.baselines_s.get(label, 0.0))

    def describe(self) -> str:
        baselines = (f", baselines {sum(self.baselines_s.values()):.0f} s"
                     if self.baselines_s else "")
        return (f"references {sum(self.references_s.values()):.0f} s, host peaks "
                f"{self.peaks_s:.0f} s{baselines}; then the closing table, at least "
                f"{sum(self.closing_s.values()):.0f} s")


class Setup:
    """Everything a run measures before its search, reused where the store allows."""

    def __init__(self, goal: Goal, store: Store, evaluator: Evaluator,
                 log: Callable[[str], None], phase: Callable[[str], None]):
        self.goal, self.store, self.evaluator = goal, store, evaluator
        self._log, self._phase = log, phase
        workload = evaluator.workload
        names = list(goal.baselines or workload.default_baselines(goal.device))
        compiling = workload.compiling_baselines
        if all(name in compiling for name in names):  # someone must be able to be incumbent
            names += [n for n in workload.default_baselines(goal.device) if n not in compiling]
        self.names = tuple(names)
        self._fingerprint = host_fingerprint(goal.threads)  # reads /proc/cpuinfo: once
        source = ""
        if workload.source_file is not None:  # a user's workload: its text is part of it
            digest = hashlib.sha256(Path(workload.source_file).read_bytes()).hexdigest()
            source = f" {digest[:16]}"
        self._workload_key = f"{workload.name}{source}"
        # per shape: the baselines whose time per call the store knows, with its source
        self.cached = {case.shape.label: self._recall(case.shape.label)
                       for case in evaluator.targets}
        self.estimate: SetupEstimate | None = None

    # -- the estimate ----------------------------------------------------------------
    def check(self, budget: Budget) -> SetupEstimate | None:
        """Refuse at once a budget the setup alone would not fit (GoalError); say when
        other work keeps this host's cores busy."""
        busy = busy_cores()
        if busy >= 0.5:
            self._log(f"warning: other processes keep {busy:.1f} of this host's "
                      f"{os.cpu_count()} cores busy: timings will be slow and noisy, and a "
                      "multi-threaded benchmark stalls whenever one of its threads waits for "
                      "a busy core (figures from a quiet host are what to compare)")
        self._log("estimating the setup's cost on probe shapes")
        estimate = self.estimate = self._estimate()
        if estimate is None:
            return None
        self._log(f"setup estimate: about {estimate.setup_s:.0f} s ({estimate.describe()})")
        if estimate.setup_s > SETUP_SHARE * budget.seconds:
            needed = 10 * math.ceil(estimate.setup_s / SETUP_SHARE / 10)
            raise GoalError(
                f"the setup alone would take about {estimate.setup_s:.0f} s of the "
                f"{budget.seconds:.0f} s budget ({estimate.describe()}); at most "
                f"{SETUP_SHARE:.0%} of a budget may go to it. The costliest shape is "
                f"{estimate.costliest()}. Give --budget {needed}s or more, or fewer or "
                "smaller shapes.")
        return estimate

    def _estimate(self) -> SetupEstimate | None:
        """Time each target's probe shape (None where the workload names none)."""
        workload = self.evaluator.workload
        references: dict[str, float] = {}
        closing: dict[str, float] = {}
        calls: dict[str, dict[str, float]] = {}
        drawing: dict[str, float] = {}
        with _torch_threads(self.goal.threads):
            for case in self.evaluator.targets:
                probe = workload.probe_shape(case.shape)
                if probe is None:
                    return None
                shape, factor = probe
                label = case.shape.label
                probe_case = Case("setup probe", shape, seed=case.seed, dtype=case.dtype)
                inputs = workload.make_inputs(probe_case)
                inputs_s = drawing[label] = factor * _fastest(workload.make_inputs, probe_case)
                with torch.no_grad():
                    references[label] = 2 * (inputs_s + factor * _fastest(
                        workload.reference, inputs))  # the target and its twin
                calls[label] = self._probe_baselines(label, inputs, factor)
                fastest = min((seconds for name, seconds in calls[label].items()
                               if name not in workload.compiling_baselines), default=0.0)
                closing[label] = JOB_ESTIMATE_S + 2 * inputs_s + 2 * FINAL_MIN_ROUNDS * fastest
        in_jobs = {} if self.goal.device == "cpu" else dict.fromkeys(references,
                                                                      DEVICE_BASELINES_S)
        return SetupEstimate(references, 0.0 if self._peaks_stored() else PEAKS_ESTIMATE_S,
                             closing, calls, drawing, in_jobs)

    def _probe_baselines(self, label: str, inputs: Inputs, factor: float) -> dict[str, float]:
        """Each baseline's seconds per call on the shape: stored, else the probe's time
        scaled up (a compiling baseline is not called here: unknown, inf). On a device
        nothing is probed here (its baselines take device tensors): they are timed in jobs."""
        workload = self.evaluator.workload
        forwards, known = workload.baselines(), self.cached[label]
        seconds: dict[str, float] = {}
        if self.goal.device != "cpu":
            return seconds
        for name in self.names:
            if name in known:
                seconds[name] = known[name][0]
            elif name in workload.compiling_baselines:
                seconds[name] = math.inf
            else:
                seconds[name] = factor * _fastest(workload.call, forwards[name], inputs)
                self._save(label, name, seconds[name], "estimated")
        return seconds

    # -- the setup itself ------------------------------------------------------------
    def run(self, deadline: float | None = None) -> Calibration:
        """References, host peaks, then the baselines: the first incumbent on each shape;
        timing the baselines stops at ``deadline`` (the budget's end: a first call that
        compiles or autotunes has no estimate), raising :class:`DeadlineError`."""
        self._references()
        self._peaks()
        return self._calibrate(deadline)

    def _references(self) -> None:
        self._phase("computing references")
        self.evaluator.prepare(lambda done, total, label: self._log(
            f"computing references {done + 1}/{total}: {label}"))

    def _peaks(self) -> None:
        self._phase("measuring host peaks")
        stored = self._peaks_stored()
        if not stored:
            self._log("measuring this host's peaks (kept for later runs on this host)")
        peaks = self.evaluator.peaks = host_peaks(self.store, self.goal.threads,
                                                  self.evaluator.limits, device=self.goal.device)
        self._log(f"host peaks: {peaks.flops_per_s / 1e9:.0f} GFLOP/s float32 multiply-add "
                  f"peak, {peaks.bytes_per_s / 1e9:.1f} GB/s memory ({self.goal.threads} threads"
                  f"{', measured earlier on this host' if stored else ''})")

    def _calibrate(self, deadline: float | None = None) -> Calibration:
        """The baselines' time per call on each shape: stored by an earlier run on this
        host (measured in its closing table, or estimated), else the probe's estimate,
        else timed in sandboxed jobs. The fastest is the first incumbent; baselines that
        compile (torch.compile) are shown but never become the incumbent, so candidates
        are never timed in a job that may start processes."""
        self._phase("timing the baselines")
        seconds: dict[str, dict[str, float]] = {}
        source: dict[str, str] = {}
        for label, known in self.cached.items():
            if all(name in known for name in self.names):
                seconds[label] = {name: known[name][0] for name in self.names}
                source[label] = "stored, " + "/".join(sorted({s for _, s in known.values()}))
            elif self.estimate is not None and set(self.names) <= set(self.estimate.calls[label]):
                seconds[label], source[label] = self.estimate.calls[label], "estimated"
        missing = [label for label in self.cached if label not in seconds]
        compiles = any(name in self.evaluator.workload.compiling_baselines
                       for name in self.names)
        compile_s = {label: self._stored(label, COMPILE_KEY) for label in self.cached}
        if compiles:
            missing += [label for label, known in compile_s.items()
                        if known is None and label not in missing]
        if missing:
            started: dict[str, float] = {}

            def progress(done: int, total: int, label: str) -> None:
                started[label] = time.monotonic()
                self._log(f"timing baselines {done + 1}/{total}: {label}")

            try:
                tables = self.evaluator.side_by_side(
                    [Implementation(n, baseline=n) for n in self.names], CALIBRATION,
                    shapes=missing, progress=progress, deadline=deadline)
            except DeadlineError as exc:
                raise DeadlineError(
                    f"the setup did not fit the budget: {exc}. A baseline's first call may "
                    "compile or autotune for minutes (fla's kernels on a fresh host); give "
                    "a larger budget") from exc
            ended = [*(started[t.shape] for t in tables[1:]), time.monotonic()]
            self.remember(tables)
            for table, end in zip(tables, ended, strict=True):
                seconds[table.shape] = {n: table.seconds[n].median for n in self.names}
                source[table.shape] = "timed"
                if compiles:
                    compile_s[table.shape] = (end - started[table.shape], "measured")
                    self._save(table.shape, COMPILE_KEY, end - started[table.shape], "measured")
        compiling = self.evaluator.workload.compiling_baselines
        eligible = [name for name in self.names if name not in compiling]
        fastest = {}
        for case in self.evaluator.targets:
            label = case.shape.label
            fastest[label] = min(eligible, key=lambda n: seconds[label][n])
            times = ", ".join(f"{n} {seconds[label][n] * 1e3:.1f} ms" for n in self.names
                              if math.isfinite(seconds[label][n]))
            self._log(f"baselines on {label} ({source[label]}): {times}")
        return Calibration(self.names, fastest, seconds,
                           self.estimate.inputs_s if self.estimate is not None else {},
                           {label: known[0] for label, known in compile_s.items()
                            if compiles and known is not None},
                           self.evaluator.workload.compiling_baselines)

    def remember(self, tables: Sequence[SideBySide]) -> None:
        """Store the medians of baselines measured side by side (calibration or the
        closing table), for later runs on this host."""
        for table in tables:
            for name in self.names:
                if name in table.seconds:
                    self._save(table.shape, name, table.seconds[name].median, "measured")

    # -- reuse -----------------------------------------------------------------------
    def _peaks_stored(self) -> bool:
        """Whether this host's peaks were measured before, by a run in this store or any
        other (a device is always measured)."""
        return self.goal.device == "cpu" and peaks_known(self.store, self.goal.threads)

    def _key(self, label: str, name: str) -> str:
        return (f"baseline v2 | {self._workload_key} | {label} | {name} | "
                f"{self.goal.device} | {self._fingerprint} | torch {torch.__version__}")

    def _stored(self, label: str, name: str) -> tuple[float, str] | None:
        """A baseline's stored (seconds per call, "measured" or "estimated"), or None."""
        value = self.store.measurement(self._key(label, name))
        return None if value is None else (float(value["seconds"]), str(value["source"]))

    def _recall(self, label: str) -> dict[str, tuple[float, str]]:
        """What the store knows of each baseline on the shape."""
        if self.goal.device != "cpu":  # device baselines autotune: always timed afresh
            return {}
        known = {name: self._stored(label, name) for name in self.names}
        return {name: value for name, value in known.items() if value is not None}

    def _save(self, label: str, name: str, seconds: float, source: str) -> None:
        """Keep a time per call; an estimate never replaces a measurement."""
        if self.goal.device != "cpu" or not math.isfinite(seconds):
            return
        if source == "estimated" and (self._stored(label, name) or (0.0, ""))[1] == "measured":
            return
        self.store.save_measurement(self._key(label, name),
                                    {"seconds": seconds, "source": source})


def _fastest(call: Callable[..., object], *args: object, repeats: int = 2) -> float:
    """The fastest of a few calls: the first pays one-time costs a long call amortises."""
    best = math.inf
    for _ in range(repeats):
        begin = time.perf_counter()
        call(*args)
        best = min(best, time.perf_counter() - begin)
    return best


def busy_cores(interval_s: float = 0.25) -> float:
    """How many cores other processes kept busy over ``interval_s``, from /proc/stat; 0
    where it cannot be read. This process and its descendants are not counted (the
    sandbox's forkserver imports torch in the background while a run starts): their
    ticks, from /proc/PID/stat, are taken off the host's."""
    def sample() -> tuple[int, int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle, _own_ticks()

    try:
        total0, idle0, own0 = sample()
        time.sleep(interval_s)
        total1, idle1, own1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    if total1 <= total0:
        return 0.0
    cores = os.cpu_count() or 1
    busy = (total1 - total0) - (idle1 - idle0) - max(0, own1 - own0)
    return max(0.0, cores * busy / (total1 - total0))


def _own_ticks() -> int:
    """CPU ticks used by this process and its descendants (those reaped included), by
    /proc/PID/stat: user and system time, with the children's the kernel has added."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, total = [os.getpid()], 0
    while tree:
        pid = tree.pop()
        total += ticks.get(pid, 0)
        tree.extend(children.get(pid, ()))
    return total


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
