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
run keeps that much of its budget free of evaluations once it has a champion, so the
table fits. Until then it keeps nothing: an evaluation that may end too late for a
closing table after it times those baselines beside the candidate (:func:`beside`), and
if it is crowned, its own figures stand in for the table (:func:`stand_in`). On a short
budget this is the difference between a champion and none: the table's compiles alone
can take as long as an evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from swarmfab.evaluation import Evaluator, Implementation, SideBySide
from swarmfab.measure import CONFIRMATION, TimingPolicy
from swarmfab.records import Candidate, Estimate, Verdict
from swarmfab.swarm.budget import RESERVE_MARGIN, Budget
from swarmfab.swarm.executors import Beside
from swarmfab.swarm.setup import FINAL_MIN_ROUNDS, JOB_ESTIMATE_S, Calibration

__all__ = ["ClosingPlan", "beside", "closing_reserve", "confirm", "late_beside", "plan_closing",
           "stand_in", "summarise"]


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


def beside(calibration: Calibration, incumbents: Mapping[str, Implementation]) -> Beside:
    """Per shape, the baselines a short closing table keeps that the incumbent is not:
    what a late evaluation times beside the candidate."""
    return {label: [name for name in _fastest(calibration, label)
                    if name != incumbents[label].name] for label in calibration.seconds}


def late_beside(calibration: Calibration | None, incumbents: Mapping[str, Implementation],
                budget: Budget, need_s: float, expected_s: float) -> Beside | None:
    """What an evaluation starting now, expected to take ``expected_s``, times beside
    its candidate: :func:`beside` when the budget keeps no time for the closing table
    (``need_s``) and the evaluation may end too late for one after it; else None."""
    if budget.reserve_s or calibration is None:
        return None
    if time.monotonic() + expected_s + RESERVE_MARGIN * need_s < budget.end:
        return None
    return beside(calibration, incumbents)


def stand_in(verdict: Verdict | None, calibration: Calibration, cache: str
             ) -> list[SideBySide] | None:
    """The closing table as ``verdict``'s own rounds measured it, where they timed every
    shape's fastest baselines (as incumbent or beside the candidate); else None."""
    if verdict is None or not verdict.timings:
        return None
    tables = []
    for timing in verdict.timings:
        seconds: dict[str, Estimate] = {"champion": timing.candidate_s}
        ratios: dict[str, Estimate] = {"champion": Estimate(1.0, 1.0, 1.0)}
        if timing.incumbent in calibration.names:
            seconds[timing.incumbent] = timing.incumbent_s
            ratios[timing.incumbent] = timing.ratio.inverted()
        seconds |= timing.beside_s
        ratios |= {name: ratio.inverted() for name, ratio in timing.beside_ratio.items()}
        if timing.shape not in calibration.seconds or not set(
                _fastest(calibration, timing.shape)) <= seconds.keys():
            return None
        fraction = timing.roofline_fraction
        tables.append(SideBySide(
            shape=timing.shape, reference="champion", seconds=seconds,
            ratio_to_reference=ratios, samples=timing.samples, cache=cache,
            bound_s=None if fraction is None else fraction * timing.candidate_s.median))
    return tables


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


def confirm(evaluator: Evaluator, calibration: Calibration, champion: Candidate,
            verdict: Verdict | None, baselines: list[str], left_s: float, need_s: float,
            log: Callable[[str], None]) -> list[SideBySide]:
    """The closing table: the champion and the baselines side by side on every shape,
    sized to the ``left_s`` seconds left; where that is short of its need (``need_s``,
    :func:`closing_reserve`), the champion's own evaluation's figures if they can stand
    in for it."""
    own = stand_in(verdict, calibration, evaluator.policy.cache) if left_s < need_s else None
    if own is not None:
        timed = sorted({name for table in own for name in table.seconds if name != "champion"})
        log(f"{max(0.0, left_s):.0f} s of the budget remain, short of a closing table: the "
            f"figures are from the champion's evaluation, which timed {', '.join(timed)} "
            "in its rounds")
        return own
    champion_s = {t.shape: t.candidate_s.median for t in (verdict.timings if verdict else ())}
    plan = plan_closing(calibration, champion_s, baselines, 0.8 * left_s)
    if plan.trimmed:
        log(f"{max(0.0, left_s):.0f} s of the budget remain: each shape times the champion "
            "beside its fastest baselines only")
    log(f"search over: timing the champion and {', '.join(plan.baselines)} side by side")
    return evaluator.side_by_side(
        [Implementation("champion", artifact=evaluator.build(champion)),
         *[Implementation(name, baseline=name) for name in plan.baselines]],
        CONFIRMATION, policies=plan.policies, only=plan.only)


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
            # a memory-bound shape's bound, timed beside: its bytes moved in place
            "memory_stream_s": None if table.memory_s is None else list(
                _as_tuple(table.memory_s)),
        })
    return {"champion": champion.id if champion else None,
            "champion_dir": str(where) if where else None, "shapes": shapes}


def _as_tuple(estimate: Any) -> tuple[float, float, float]:
    values = (estimate.median, estimate.low, estimate.high)
    return tuple(v if math.isfinite(v) else float("nan") for v in values)  # type: ignore[return-value]
