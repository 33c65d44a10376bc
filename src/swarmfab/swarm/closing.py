"""The closing table's plan: which baselines to time beside the champion, and how long.

The table is the figure a user quotes, so it times every baseline side by side with the
champion under the confirmation policy, when there is time. What is left of the budget is
shared by the shapes in proportion to the cost of one round there (each implementation
after an untimed call, but for long calls: see ``TimingPolicy.long_call_s``), from the
calibration's times per call and the champion's verdict; each shape gets as many rounds as
fit, at least :data:`FINAL_MIN_ROUNDS`. Where even that would not fit with every baseline,
each shape times only its fastest baselines (the fastest that may be incumbent, and the
fastest of all where that is a compiling one): the speedup is quoted against them anyway.

:func:`closing_reserve` is what the fewest rounds against the fastest baselines cost: the
run keeps that much of its budget free of evaluations, so the table fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from swarmfab.evaluation import SideBySide
from swarmfab.measure import CONFIRMATION, TimingPolicy
from swarmfab.records import Candidate
from swarmfab.swarm.setup import FINAL_MIN_ROUNDS, JOB_ESTIMATE_S, Calibration

__all__ = ["ClosingPlan", "closing_reserve", "plan_closing", "summarise"]


@dataclass(frozen=True, slots=True)
class ClosingPlan:
    baselines: list[str]  # timed on some shape
    only: dict[str, list[str]]  # per shape label: the baselines timed there
    policies: dict[str, TimingPolicy]  # per shape label
    trimmed: bool  # short of time: each shape times its fastest baselines only


def closing_reserve(calibration: Calibration, inputs_s: Mapping[str, float]) -> float:
    """Seconds the fewest rounds of the closing table take against each shape's fastest
    baselines (the champion, faster still, not counted), with starting the job, drawing
    the inputs (``inputs_s`` per shape, where known) and, where implementations compile
    at their first call, compiling them (``Calibration.compile_s``)."""
    total = 0.0
    for label in calibration.seconds:
        names = _fastest(calibration, label)
        calls = [calibration.seconds[label][name] for name in names]
        total += (JOB_ESTIMATE_S + inputs_s.get(label, 0.0) + _compiling(calibration, label,
                                                                         names)
                  + _warm_up_s(calls) + FINAL_MIN_ROUNDS * _round_s(calls))
    return total


def _fastest(calibration: Calibration, label: str) -> list[str]:
    """The baselines a short closing table keeps on a shape: the fastest that may be
    incumbent, and the fastest of all where that is another (a compiling one)."""
    seconds = calibration.seconds[label]
    overall = min(seconds, key=lambda name: seconds[name])
    return sorted({calibration.fastest[label], overall})


def _compiling(calibration: Calibration, label: str, names: list[str]) -> float:
    """Compiling the champion, then the compiling baselines among ``names`` (one job)."""
    fixed = calibration.compile_s.get(label, 0.0)
    return fixed * (1 + any(name in calibration.compiling for name in names))


def plan_closing(calibration: Calibration, champion_s: dict[str, float],
                 baselines: list[str], left_s: float) -> ClosingPlan:
    """Fit the closing table into ``left_s`` seconds (see the module's docstring)."""
    seconds = calibration.seconds
    only = {label: list(baselines) for label in seconds}

    def costs() -> dict[str, tuple[float, float]]:  # per shape: fixed costs, one round
        return {label: (JOB_ESTIMATE_S + calibration.inputs_s.get(label, 0.0)
                        + _compiling(calibration, label, only[label]) + _warm_up_s(calls),
                        _round_s(calls))
                for label in seconds
                for calls in [[seconds[label][n] for n in only[label]]
                              + [champion_s.get(label, 0.0)]]}

    planned = costs()
    trimmed = sum(w + FINAL_MIN_ROUNDS * r for w, r in planned.values()) > left_s
    if trimmed:
        only = {label: _fastest(calibration, label) for label in seconds}
        planned = costs()
    spare = max(0.0, left_s - sum(w for w, _ in planned.values()))
    total = sum(r for _, r in planned.values()) or 1.0
    policies = {}
    for label, (_, round_s) in planned.items():
        share = spare * round_s / total
        fits = int(share // round_s) if round_s > 0 else CONFIRMATION.min_rounds
        policies[label] = replace(
            CONFIRMATION, min_rounds=max(FINAL_MIN_ROUNDS, min(CONFIRMATION.min_rounds, fits)),
            max_seconds=max(0.5, min(CONFIRMATION.max_seconds, share)),
            warmup_calls=0 if fits < CONFIRMATION.min_rounds else CONFIRMATION.warmup_calls)
    timed = [name for name in baselines if any(name in names for names in only.values())]
    return ClosingPlan(timed, only, policies, trimmed)


def _round_s(calls: list[float]) -> float:
    """One round: each call, after an untimed one where it is short."""
    return sum(_finite(t) * (1 if t >= CONFIRMATION.long_call_s else 2) for t in calls)


def _warm_up_s(calls: list[float]) -> float:
    return sum(_finite(t) for t in calls)


def _finite(seconds: float) -> float:
    """A baseline's time per call; a compiling one's is unknown until timed (0 here)."""
    return seconds if math.isfinite(seconds) else 0.0


def summarise(champion: Candidate | None, final: list[SideBySide], where: Path | None
              ) -> dict[str, Any]:
    """The run's summary for the store: the champion and the closing table's figures."""
    shapes = []
    for table in final:
        baselines = {n: e for n, e in table.seconds.items() if n != "champion"}
        fastest = min(baselines, key=lambda n: baselines[n].median)
        shapes.append({
            "shape": table.shape,
            "seconds": {n: [e.median, e.low, e.high] for n, e in table.seconds.items()},
            "fastest_baseline": fastest,
            "speedup": list(_as_tuple(table.ratio_to_reference[fastest])),
            # each baseline's time over the champion's, paired per round
            "speedups": {n: list(_as_tuple(table.ratio_to_reference[n])) for n in baselines},
            "samples": table.samples,
            "roofline_fraction": table.roofline_fraction("champion"),
        })
    return {"champion": champion.id if champion else None,
            "champion_dir": str(where) if where else None, "shapes": shapes}


def _as_tuple(estimate: Any) -> tuple[float, float, float]:
    values = (estimate.median, estimate.low, estimate.high)
    return tuple(v if math.isfinite(v) else float("nan") for v in values)  # type: ignore[return-value]
