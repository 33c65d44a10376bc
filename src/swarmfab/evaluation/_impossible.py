"""The impossible-speed check: a time more than :data:`IMPOSSIBLE_FRACTION` below what
the host's peak FLOP rate allows cannot be a real measurement, so the verdict is a
rejection. It rests on the stored peak; a peak measured while other work kept the host
busy is low (this project's 2-core EPYC kept 90 GFLOP/s from a busy hour against 550
measured quiet), so a caller that measures the peak again can have the same timings
judged against it (:func:`rejudged`) before anything is recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from swarmfab.evaluation._outcomes import accepted_summary
from swarmfab.measure.roofline import IMPOSSIBLE_FRACTION, HostPeaks
from swarmfab.records import Candidate, ShapeTiming, Status, Verdict
from swarmfab.workloads import AnyShape, Workload

__all__ = ["IMPOSSIBLE_MARK", "impossible_reason", "impossible_timing", "rejudged"]

IMPOSSIBLE_MARK = "(flagged as impossible)"  # ends the reason of such a rejection


def impossible_timing(workload: Workload, shapes: Sequence[AnyShape], peaks: HostPeaks | None,
                      timings: Sequence[ShapeTiming]) -> ShapeTiming | None:
    """The first of ``timings`` faster than ``peaks`` allow (``shapes``: the target shapes
    the timings' labels name), or None."""
    if peaks is None:
        return None
    for timing in timings:
        flops = _flops(workload, shapes, timing)
        floor = peaks.compute_bound_seconds(flops) / IMPOSSIBLE_FRACTION if flops else 0.0
        if timing.candidate_s.median < floor:
            return timing
    return None


def impossible_reason(timing: ShapeTiming) -> str:
    return (f"{timing.shape}: measured {timing.candidate_s.median * 1e3:.3f} ms is more than "
            f"{IMPOSSIBLE_FRACTION:g}x faster than this host's peak FLOP rate allows; the "
            f"timing cannot be trusted {IMPOSSIBLE_MARK}")


def rejudged(candidate: Candidate, verdict: Verdict, workload: Workload,
             shapes: Sequence[AnyShape], before: HostPeaks, after: HostPeaks) -> Verdict:
    """``verdict``, rejected as impossible against the peaks ``before``, judged again on
    its own timings against ``after`` (measured since). Accepted where none is impossible
    now; a roofline fraction whose bound was the old compute bound is dropped (the bound
    beside it, the memory stream's, was not kept)."""
    if impossible_timing(workload, shapes, after, verdict.timings) is not None:
        return verdict
    timings = []
    for timing in verdict.timings:
        flops = _flops(workload, shapes, timing)
        fraction = timing.roofline_fraction
        if fraction is not None and flops:
            bound = fraction * timing.candidate_s.median
            if bound <= before.compute_bound_seconds(flops) * (1 + 1e-9):
                fraction = None
        timings.append(dataclasses.replace(timing, roofline_fraction=fraction))
    return dataclasses.replace(verdict, status=Status.ACCEPTED,
                               reason=accepted_summary(timings), timings=tuple(timings))


def _flops(workload: Workload, shapes: Sequence[AnyShape], timing: ShapeTiming
           ) -> float | None:
    """The FLOPs of the target shape ``timing`` names (None where no shape has its label,
    or the workload has no cost model)."""
    shape = next((shape for shape in shapes if shape.label == timing.shape), None)
    return workload.flops(shape) if shape is not None else None
