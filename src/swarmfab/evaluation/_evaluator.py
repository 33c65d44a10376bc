"""The Evaluator: build, verify and benchmark one candidate, ending in a Verdict.

Runs in the trusted parent. Candidate code only ever executes inside sandboxed jobs
(:mod:`._worker`); the float64 references are computed here, before any candidate runs,
and the comparison happens here too."""

from __future__ import annotations

import dataclasses
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmfab.backends import Artifact, get_backend
from swarmfab.errors import BuildError, DeadlineError, MeasurementError, SandboxError
from swarmfab.evaluation import _conductor as conductor
from swarmfab.evaluation import _impossible as impossibility
from swarmfab.evaluation._battery import Battery
from swarmfab.evaluation._bound import MEMORY_STREAM, bound_seconds, memory_bound
from swarmfab.evaluation._cores import CoreBroker, pinned_thread
from swarmfab.evaluation._kept import KeptVerdicts
from swarmfab.evaluation._limits import held, job_limits, warm_start
from swarmfab.evaluation._outcomes import accepted_summary, build_failed, job_failed, rejected
from swarmfab.evaluation._references import References, salted_seed, with_salt
from swarmfab.evaluation._worker import (
    CaseRun,
    Implementation,
    ShapeRun,
    case_runs,
    run_cases,
    serve_implementation,
)
from swarmfab.measure import (
    CONFIRMATION,
    EVALUATION,
    TimingPolicy,
    classify,
    median_ci,
    paired_ratio,
)
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, CheckResult, Estimate, ShapeTiming, Status, Verdict
from swarmfab.sandbox import (
    JobOutcome,
    JobStatus,
    Limits,
    Session,
    SessionEnded,
    run_job,
    start_forkserver,
    start_session,
)
from swarmfab.verify import probes
from swarmfab.workloads import AnyShape, Case, Tolerances, Workload

__all__ = ["Cancelled", "Evaluator", "EvaluatorRecipe", "SideBySide"]

REGRESSION_EPSILON = 0.02
SIDE_BY_SIDE_WALL_S = 600.0  # per shape; only trusted or verified implementations
DEADLINE_SLACK_S = 1.0  # a job ended this close to its deadline was stopped by it
# what each job's answer may hold beside builtins and tensors, and its well-formedness
_ANSWERS: dict[Callable[..., Any], tuple[tuple[type, ...], Callable[[Any], bool]]] = {
    run_cases: ((CaseRun,), case_runs),
}


class Cancelled(Exception):
    """An evaluation stopped because the run is stopping; it has no verdict."""


@dataclass(frozen=True, slots=True)
class SideBySide:
    """Every implementation timed on one shape in one run, ratios against ``reference``."""

    shape: str
    reference: str
    seconds: dict[str, Estimate]
    ratio_to_reference: dict[str, Estimate]
    samples: int
    bound_s: float | None = None  # roofline bound of this shape, when the peaks are known
    cache: str = "warm"  # or "cold": caches flushed before every sample
    # median minor page faults per call, per implementation (where /proc tells): the
    # share of a call the OS spends mapping fresh memory shows here, not in the kernel
    faults: dict[str, float] = field(default_factory=dict)
    # a memory-bound shape's compulsory bytes moved by an in-place update in the same
    # rounds (the bound's memory term, :mod:`._bound`); None where not timed
    memory_s: Estimate | None = None

    def roofline_fraction(self, name: str) -> float | None:
        return None if self.bound_s is None else self.bound_s / self.seconds[name].median


@dataclass(frozen=True, slots=True)
class EvaluatorRecipe:
    """Everything but the corpus and the build cache needed to rebuild an evaluator (the
    references are computed again, and its secret salts are its own)."""

    workload: str  # a built-in workload's name, or the path of a workload file
    target_shapes: tuple[AnyShape, ...]
    threads: int
    tolerances: Tolerances
    limits: Limits
    policy: TimingPolicy
    seed: int
    peaks: HostPeaks | None
    device: str = "cpu"
    dtype: str = "float32"

    def build(self, cache_dir: Path, cases: list[Case]) -> Evaluator:
        from swarmfab.workloads import get_workload

        return Evaluator(get_workload(self.workload), self.target_shapes, cache_dir,
                         threads=self.threads, tolerances=self.tolerances, limits=self.limits,
                         policy=self.policy, seed=self.seed, cases=cases, peaks=self.peaks,
                         device=self.device, dtype=self.dtype)


class Evaluator:
    """Judges candidates of one workload against one set of target shapes.

    Thread-safe: several evaluations may run at once (one per executor worker). Every
    build and sandboxed job runs on cores leased from ``cores``, so concurrent work never
    shares a core; the references are computed in this process, on the same lease.
    """

    def __init__(
        self,
        workload: Workload,
        target_shapes: Sequence[AnyShape],
        cache_dir: Path,
        *,
        threads: int,
        tolerances: Tolerances,
        limits: Limits,
        policy: TimingPolicy | None = None,
        seed: int = 0,
        cases: list[Case] | None = None,
        peaks: HostPeaks | None = None,
        cores: CoreBroker | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ):
        if dtype not in workload.dtypes:
            raise ValueError(f"workload {workload.name} takes its inputs in "
                             f"{' or '.join(workload.dtypes)}, not {dtype}")
        self.workload = workload
        self.device = device  # where candidates and baselines run: "cpu" or "cuda"
        self.dtype = dtype  # every case it runs gives its inputs in this dtype
        self.target_shapes = list(target_shapes)
        self.seed = seed
        self.cache_dir = cache_dir
        self.threads = threads
        self.tolerances = tolerances
        self.limits = limits
        self.policy = policy or EVALUATION
        self.cases = list(cases) if cases is not None else workload.validation_cases()
        # every seed a candidate meets is salted with a secret, so no candidate can
        # recognise the verification inputs and be honest on those alone
        salt = secrets.randbelow(2**31)
        self.targets = [
            Case(f"target {shape.label}", shape, seed=salted_seed(seed + 1000 + i, salt),
                 dtype=dtype)
            for i, shape in enumerate(target_shapes)
        ]
        self.references = References(workload, tolerances, self.targets)
        self.battery = Battery(workload, threads, dtype, tolerances)
        self.kept = KeptVerdicts(cache_dir, workload, threads=threads, dtype=dtype,
                                 device=device, tolerances=tolerances)
        self._local = threading.local()  # each thread's last verification cases
        self.peaks = peaks  # enables roofline fractions and the impossible-speed check
        self.cores = cores or CoreBroker()
        self._cancel = threading.Event()
        # jobs find the workload by name, or in a staged copy of the user's workload file
        self._job_workload, self._stage = workload.name, {}
        if workload.source_file is not None:
            self._job_workload = f"workload/{Path(workload.source_file).name}"
            self._stage = {self._job_workload: Path(workload.source_file)}
        # the jobs' forkserver imports torch (and its compiler, where jobs compile) while
        # this process goes on to its references and builds
        start_forkserver(compiler=workload.jobs_compile)

    def recipe(self) -> EvaluatorRecipe:
        """How to make an equivalent evaluator elsewhere (another process or machine)."""
        workload = self.workload.source_file or self.workload.name
        return EvaluatorRecipe(str(workload), tuple(self.target_shapes), self.threads,
                               self.tolerances, self.limits, self.policy, self.seed, self.peaks,
                               self.device, self.dtype)

    def cancel(self) -> None:
        """Stop every evaluation in progress (their jobs are killed; they raise
        :class:`Cancelled`) and every later one: the run is stopping."""
        self._cancel.set()

    def resume(self) -> None:
        """Take work again after :meth:`cancel` (e.g. for the run's closing benchmark)."""
        self._cancel.clear()

    def prepare(self, progress: Callable[[int, int, str], None] | None = None) -> None:
        """Compute the target shapes' references (the costly ones) up front;
        ``progress(done, total, label)`` is told before each shape starts."""
        for number, case in enumerate(self.targets):
            if progress is not None:
                progress(number, len(self.targets), case.shape.label)
            self.references.of(case)
            self.references.of(probes.twin_case(case))

    # -- one candidate -------------------------------------------------------------
    def build(self, candidate: Candidate) -> Artifact:
        """Build (or reuse) a candidate; a cache that cannot be written is the platform's
        problem, not the candidate's, so it raises instead of becoming a verdict."""
        with self.cores.lease(1) as cores, pinned_thread(cores):  # the compiler's core
            try:
                return get_backend(candidate.backend).build(candidate, self.cache_dir)
            except OSError as exc:
                raise SandboxError(f"cannot write the build cache under {self.cache_dir}: "
                                   f"{exc.strerror or exc} (is the disk full?)") from exc

    def _job(self, job: Callable[..., Any], *args: Any, limits: Limits,
             stage: dict[str, Path], cores: tuple[int, ...] | None = None) -> JobOutcome:
        """A sandboxed job on leased cores (``cores``, or a lease of its own)."""
        if cores is None:
            with self.cores.lease(self.threads) as leased:
                return self._job(job, *args, limits=limits, stage=stage, cores=leased)
        if self._cancel.is_set():
            raise Cancelled("the run is stopping")
        stage, links = self._warm_start(limits, cores, stage)
        records, expect = _ANSWERS[job]
        outcome = run_job(job, *args, limits=dataclasses.replace(limits, cores=cores),
                          stage=stage, cancel=self._cancel, links=links, records=records,
                          expect=expect)
        if outcome.status is JobStatus.CANCELLED:
            raise Cancelled("the run is stopping")
        return outcome

    def _conduct(
        self, plan: list[tuple[Case, list[Implementation]]], policy: TimingPolicy,
        checked: str | None, cores: tuple[int, ...], wall_s: float = 0.0,
        deadline: float | None = None,
    ) -> JobOutcome:
        """Time ``plan`` side by side (:mod:`._conductor`), every implementation in a
        session of its own on ``cores``, at least ``wall_s`` allowed to each but none past
        ``deadline``; how it ended, as a job's outcome. Every session lives until the
        whole plan is timed, so each is allowed a job's wall-clock limit per shape of the
        plan: an evaluation on five large shapes against a slow baseline on a loaded host
        otherwise ran out of one job's limit (a trusted baseline's slowness, counted
        against the candidate as a timeout)."""
        if self._cancel.is_set():
            raise Cancelled("the run is stopping")
        plan, stage = conductor.staged(plan)

        def start(implementation: Implementation, cases: list[Case]) -> Session:
            limits = self._limits_for([implementation])
            allowed = max(limits.wall_s * len(cases), wall_s)
            if deadline is not None:
                allowed = max(0.1, min(allowed, deadline - time.monotonic()))
            limits = dataclasses.replace(limits, cores=cores, wall_s=allowed)
            files, links = self._warm_start(limits, cores, {**stage, **self._stage})
            return start_session(serve_implementation, self._job_workload, implementation,
                                 cases, self.threads, self.device, limits=limits,
                                 stage=files, links=links, cancel=self._cancel,
                                 name=implementation.name)

        try:
            with pinned_thread(cores):  # the conductor waits on the sessions' cores
                return JobOutcome(JobStatus.OK,
                                  conductor.benchmark(plan, policy, checked, self.device, start))
        except SessionEnded as ended:
            if ended.outcome.status is JobStatus.CANCELLED:
                raise Cancelled("the run is stopping") from None
            return ended.outcome

    def verify(self, candidate: Candidate, cases: Sequence[Case] | None = None) -> Verdict:
        """Build and check on ``cases`` (default: the corpus), without timing."""
        started = time.monotonic()
        try:
            artifact = self.build(candidate)
        except BuildError as exc:
            return build_failed(candidate, exc, started)
        return self._verify_cases(candidate, artifact, started, self.cases if cases is None
                                  else list(cases))

    def verify_battery(self, candidate: Candidate, fast: Verdict | None = None) -> Verdict:
        """The second tier: the workload's battery (real sizes, extreme values, other
        layouts and thread counts), each case with the probes; an accepted verdict is kept
        (:mod:`._kept`). With ``fast``, the first tier's verdict too, read as one."""
        def judge() -> Verdict:
            self.references.keep(self.battery.cases())
            return self.battery.judge(lambda cases: self.verify(candidate, cases))
        verdict = self.kept.judged(candidate, self.workload.battery_cases(self.threads), judge)
        return self.battery.after(fast, verdict)

    def evaluate(
        self, candidate: Candidate, incumbents: dict[str, Implementation],
        extra_cases: Sequence[Case] = (), beside: Mapping[str, Sequence[str]] | None = None,
    ) -> Verdict:
        """Build, verify (corpus plus ``extra_cases``), then time against the incumbents.

        ``incumbents`` maps a target shape's label to what the candidate must beat there;
        ``beside`` names, per label, baselines timed in the same rounds but not judged
        against (``ShapeTiming.beside_s``).
        """
        started = time.monotonic()
        try:
            artifact = self.build(candidate)
        except BuildError as exc:
            return build_failed(candidate, exc, started)
        verdict = self._verify_cases(candidate, artifact, started, [*self.cases, *extra_cases])
        if verdict.status is not Status.ACCEPTED:
            return verdict
        return held(self._benchmark(candidate, artifact, incumbents, verdict.checks, started,
                                    beside), verdict)

    def rematch(self, candidate: Candidate, incumbents: dict[str, Implementation]) -> Verdict:
        """Time an already verified candidate again, against other incumbents (the
        champion changed while it was being evaluated); the target shapes' outputs are
        checked again as part of timing."""
        started = time.monotonic()
        try:
            artifact = self.build(candidate)  # cached
        except BuildError as exc:
            return build_failed(candidate, exc, started)
        return self._benchmark(candidate, artifact, incumbents, (), started)

    def _benchmark(
        self, candidate: Candidate, artifact: Artifact, incumbents: dict[str, Implementation],
        verified: tuple[CheckResult, ...], started: float,
        beside: Mapping[str, Sequence[str]] | None = None,
    ) -> Verdict:
        mine = Implementation("candidate", artifact=artifact, source=candidate)
        beside = beside or {}
        plan = [(case, self._with_stream(case, [
                    incumbents[case.shape.label],
                    *[Implementation(name, baseline=name)
                      for name in beside.get(case.shape.label, ())
                      if name != incumbents[case.shape.label].name], mine]))
                for case in self.targets]
        # the outputs are compared on the sessions' cores too: it is verification work,
        # and on any other core it would disturb a benchmark running there
        with self.cores.lease(self.threads) as cores:
            outcome = self._conduct(plan, self.policy, "candidate", cores)
            if outcome.status is not JobStatus.OK:
                return job_failed(candidate, outcome, "benchmark", started, verified)
            with pinned_thread(cores):
                return self._judge_timings(candidate, outcome, incumbents, verified, started)

    def _judge_timings(
        self, candidate: Candidate, outcome: JobOutcome, incumbents: dict[str, Implementation],
        verified: tuple[CheckResult, ...], started: float,
    ) -> Verdict:
        checks = list(verified)
        timings = []
        for case, run in zip(self.targets, outcome.value, strict=True):
            shape_checks = self.references.target_checks(case, run)
            checks.extend(shape_checks)
            failed = next((c for c in shape_checks if not c.passed), None)
            if failed is not None:
                return rejected(candidate, failed, tuple(checks), started)
            timings.append(self._timing(case.shape, run, incumbents[case.shape.label].name))
        if (impossible := self.impossible(timings)) is not None:
            reason = impossibility.impossible_reason(impossible)
            return Verdict(candidate.id, Status.REJECTED, reason, tuple(checks), tuple(timings),
                           time.monotonic() - started)
        return Verdict(candidate.id, Status.ACCEPTED, accepted_summary(timings), tuple(checks),
                       tuple(timings), time.monotonic() - started)

    def side_by_side(
        self, implementations: list[Implementation], policy: TimingPolicy = CONFIRMATION,
        *, shapes: Collection[str] | None = None,
        policies: Mapping[str, TimingPolicy] | None = None,
        progress: Callable[[int, int, str], None] | None = None,
        only: Mapping[str, Collection[str]] | None = None,
        deadline: float | None = None,
    ) -> list[SideBySide]:
        """Time several implementations together on every target shape (first = reference).

        ``shapes`` limits it to those target labels; ``policies`` overrides ``policy`` per
        label; ``only`` names, per label, the implementations timed there (the reference
        always is); ``progress(done, total, label)`` is told before each shape starts.
        One job per shape, each allowed at least :data:`SIDE_BY_SIDE_WALL_S`: the policy
        bounds how long timing goes on, and slow baselines on large shapes (a Python loop
        per token) may need more than one evaluation's limit on a busy machine; none
        beyond ``deadline`` (a ``time.monotonic()`` instant: a run's budget), where a shape
        not timed by then raises :class:`DeadlineError`."""
        runs = []
        cases = [c for c in self.targets if shapes is None or c.shape.label in shapes]
        for number, case in enumerate(cases):
            if progress is not None:
                progress(number, len(cases), case.shape.label)
            chosen = implementations
            if only is not None and case.shape.label in only:
                chosen = [impl for number, impl in enumerate(implementations)
                          if number == 0 or impl.name in only[case.shape.label]]
            shape_policy = (policies or {}).get(case.shape.label, policy)
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineError(f"no time was left to time {case.shape.label}")
            with self.cores.lease(self.threads) as cores:
                outcome = self._conduct([(case, self._with_stream(case, chosen))], shape_policy,
                                        None, cores,
                                        wall_s=SIDE_BY_SIDE_WALL_S, deadline=deadline)
            if (outcome.status is JobStatus.TIMED_OUT and deadline is not None
                    and time.monotonic() >= deadline - DEADLINE_SLACK_S):
                raise DeadlineError(f"timing {case.shape.label} was stopped at the deadline "
                                    f"({outcome.detail})")
            if outcome.status is not JobStatus.OK:
                raise MeasurementError(f"side-by-side benchmark failed on {case.shape.label}: "
                                       f"{outcome.detail}")
            runs.extend(outcome.value)
        reference = implementations[0].name
        tables = []
        for run in runs:
            if run.error:
                raise MeasurementError(f"side-by-side benchmark failed on {run.shape}: {run.error}")
            seconds, stream = _without_stream(run.seconds)
            tables.append(SideBySide(
                shape=run.shape, reference=reference,
                seconds={name: median_ci(s) for name, s in seconds.items()},
                ratio_to_reference={
                    name: paired_ratio(s, seconds[reference]) for name, s in seconds.items()
                },
                samples=len(seconds[reference]),
                bound_s=self._bound(self._target_shape(run.shape), stream), cache=policy.cache,
                faults={name: statistics.median(f) for name, f in run.faults.items()
                        if f and name != MEMORY_STREAM},
                memory_s=None if stream is None else median_ci(stream),
            ))
        return tables

    # -- helpers -------------------------------------------------------------------
    def _limits_for(self, implementations: list[Implementation]) -> Limits:
        return job_limits(self.limits, self.device, self.workload, self.cache_dir,
                          implementations)

    def _warm_start(self, limits: Limits, cores: tuple[int, ...], stage: dict[str, Path]
                    ) -> tuple[dict[str, Path], dict[str, Path]]:
        return warm_start(limits, self.device, self.cache_dir, cores, stage)

    def add_case(self, case: Case) -> None:
        """Grow the corpus: every later verification includes ``case``."""
        if all(existing.name != case.name for existing in self.cases):
            self.cases.append(case)

    def case_of(self, check: CheckResult, cases: Sequence[Case]) -> Case | None:
        """The case (among ``cases``) a check of the last verification was made on, as it
        was run (salted seed), so storing it reproduces the failure exactly."""
        names = {case.name for case in cases}
        last: list[Case] = getattr(self._local, "cases", [])
        return next((case for case in last if case.name in names and check.case
                     .split(" (")[0] == case.name), None)

    def _verify_cases(
        self, candidate: Candidate, artifact: Artifact, started: float, cases: list[Case]
    ) -> Verdict:
        salt = secrets.randbelow(2**31)
        cases = [with_salt(case, salt).in_dtype(self.dtype) for case in cases]
        self._local.cases = cases
        staged = Artifact(artifact.backend, Path("artifacts/candidate") / artifact.path.name)
        # the references are computed while the worker runs the candidate (the parent
        # would otherwise sit idle), on the job's cores, then dropped: salted seeds never
        # repeat
        with self.cores.lease(self.threads) as cores, ThreadPoolExecutor(max_workers=1) as pool:
            references = pool.submit(self._pinned, cores, self.references.compute, cases)
            mine = Implementation("candidate", artifact, source=candidate)
            outcome = self._job(run_cases, self._job_workload, staged, cases, self.threads,
                                self.device, limits=self._limits_for([mine]),
                                stage={str(staged.path): artifact.path, **self._stage},
                                cores=cores)
            references.result()
            try:
                with pinned_thread(cores):  # comparing is verification work: on the lease
                    return held(self._judge_cases(candidate, outcome, cases, started), outcome)
            finally:
                self.references.forget(cases)

    @staticmethod
    def _pinned(cores: tuple[int, ...], work: Callable[..., None], *args: Any) -> None:
        with pinned_thread(cores):
            work(*args)

    def _judge_cases(
        self, candidate: Candidate, outcome: JobOutcome, cases: list[Case], started: float
    ) -> Verdict:
        if outcome.status is not JobStatus.OK:
            return job_failed(candidate, outcome, "verification", started)
        checks: list[CheckResult] = []
        for case, run in zip(cases, outcome.value, strict=True):
            checks.extend(self.references.case_checks(case, run))
        failed = next((c for c in checks if not c.passed), None)
        if failed is not None:
            return rejected(candidate, failed, tuple(checks), started)
        return Verdict(candidate.id, Status.ACCEPTED, f"correct on {len(cases)} cases",
                       tuple(checks), (), time.monotonic() - started)

    def _timing(self, shape: AnyShape, run: ShapeRun, incumbent: str) -> ShapeTiming:
        """The candidate against the incumbent; any other implementation timed in the
        same rounds was timed beside them."""
        seconds, stream = _without_stream(run.seconds)
        mine, theirs = seconds["candidate"], seconds[incumbent]
        ratio = paired_ratio(mine, theirs)
        candidate_s = median_ci(mine)
        bound = self._bound(shape, stream)
        others = [name for name in seconds if name not in ("candidate", incumbent)]
        return ShapeTiming(
            shape=shape.label, incumbent=incumbent, candidate_s=candidate_s,
            incumbent_s=median_ci(theirs), ratio=ratio,
            comparison=classify(ratio, REGRESSION_EPSILON), samples=len(mine),
            roofline_fraction=None if bound is None else bound / candidate_s.median,
            beside_s={name: median_ci(seconds[name]) for name in others},
            beside_ratio={name: paired_ratio(mine, seconds[name]) for name in others},
        )

    def _bound(self, shape: AnyShape, stream: list[float] | None = None) -> float | None:
        return bound_seconds(self.workload, shape, self.peaks, stream, self.dtype)

    def _with_stream(self, case: Case, implementations: list[Implementation]
                     ) -> list[Implementation]:
        """``implementations``, and where the shape is memory-bound the memory stream
        that times its bound's memory term in the same rounds (:mod:`._bound`)."""
        if not memory_bound(self.workload, case.shape, self.peaks, self.dtype):
            return implementations
        return [*implementations, Implementation(MEMORY_STREAM, memory_stream=True)]

    def impossible(self, timings: Sequence[ShapeTiming]) -> ShapeTiming | None:
        """The first of ``timings`` faster than this evaluator's peaks allow, or None."""
        return impossibility.impossible_timing(self.workload, self.target_shapes, self.peaks,
                                               timings)

    def rejudged(self, candidate: Candidate, verdict: Verdict, before: HostPeaks) -> Verdict:
        """``verdict``, rejected as impossible against ``before``, judged again on its own
        timings against this evaluator's peaks, measured since (:mod:`._impossible`)."""
        if self.peaks is None or impossibility.IMPOSSIBLE_MARK not in verdict.reason:
            return verdict
        return impossibility.rejudged(candidate, verdict, self.workload, self.target_shapes,
                                      before, self.peaks)

    def _target_shape(self, label: str) -> AnyShape:
        return next(case.shape for case in self.targets if case.shape.label == label)


def _without_stream(seconds: dict[str, list[float]]
                    ) -> tuple[dict[str, list[float]], list[float] | None]:
    """A run's samples per implementation, less the memory stream's, and the stream's
    (None where it was not timed): it is the bound's, never an implementation."""
    rest = dict(seconds)
    return rest, rest.pop(MEMORY_STREAM, None)
