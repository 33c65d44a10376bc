"""Verdicts for the ways an evaluation can end before or after the checks."""

from __future__ import annotations

import math
import time

from swarmfab.errors import BuildError
from swarmfab.records import Candidate, CheckResult, ShapeTiming, Status, Verdict
from swarmfab.sandbox import JobOutcome, JobStatus

__all__ = ["accepted_summary", "build_failed", "job_failed", "rejected"]


def accepted_summary(timings: list[ShapeTiming]) -> str:
    speedups = [t.ratio.inverted().median for t in timings]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    return f"verified; {geomean:.2f}x vs incumbent (geometric mean over {len(timings)} shapes)"


def build_failed(candidate: Candidate, exc: BuildError, started: float) -> Verdict:
    diagnostics = tuple(str(d) for d in exc.diagnostics if d.severity != "warning")[:20]
    return Verdict(candidate.id, Status.BUILD_FAILED, str(exc), (), (),
                   time.monotonic() - started, diagnostics or (exc.log[-2000:],))


def rejected(
    candidate: Candidate, failed: CheckResult, checks: tuple[CheckResult, ...], started: float
) -> Verdict:
    reason = f"case {failed.case!r}: {failed.check} failed: {failed.detail}"
    return Verdict(candidate.id, Status.REJECTED, reason, checks, (), time.monotonic() - started)


def job_failed(
    candidate: Candidate, outcome: JobOutcome, stage: str, started: float,
    checks: tuple[CheckResult, ...] = (),
) -> Verdict:
    status = {JobStatus.TIMED_OUT: Status.TIMED_OUT, JobStatus.CRASHED: Status.CRASHED}.get(
        outcome.status, Status.REJECTED
    )
    reason = f"{stage}: {outcome.detail}"
    return Verdict(candidate.id, status, reason, checks, (), time.monotonic() - started)
