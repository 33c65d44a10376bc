"""The closing table's plan: which baselines to time beside the champion, and how long.

The table is the figure a user quotes, so it times every baseline side by side with the
champion under the confirmation policy, when there is time. What is left of the budget is
shared by the shapes in proportion to the cost of one round there (each implementation
after an untimed call, from the calibration's times per call and the champion's verdict);
each shape gets as many rounds as fit, at least :data:`FINAL_MIN_ROUNDS`. Where even that
would not fit with every baseline, only the baselines that are the fastest on some shape
are timed: the speedup is quoted against the fastest baseline anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from swarmfab.evaluation import SideBySide
from swarmfab.measure import CONFIRMATION, TimingPolicy
from swarmfab.records import Candidate
from swarmfab.swarm.setup import FINAL_MIN_ROUNDS, Calibration

__all__ = ["ClosingPlan", "plan_closing", "summarise"]


@dataclass(frozen=True, slots=True)
class ClosingPlan:
    baselines: list[str]
    policies: dict[str, TimingPolicy]  # per shape label
    dropped: list[str]  # baselines left out for want of time


def plan_closing(calibration: Calibration, champion_s: dict[str, float],
                 baselines: list[str], left_s: float) -> ClosingPlan:
    """Fit the closing table into ``left_s`` seconds (see the module's docstring)."""
    seconds = calibration.seconds

    def round_costs(names: list[str]) -> dict[str, float]:
        return {label: 2 * (sum(_finite(seconds[label][n]) for n in names)
                            + champion_s.get(label, 0.0)) for label in seconds}

    costs, dropped = round_costs(baselines), []
    if FINAL_MIN_ROUNDS * sum(costs.values()) > left_s:
        fastest = set(calibration.fastest.values())
        dropped = [name for name in baselines if name not in fastest]
        baselines = [name for name in baselines if name in fastest]
        costs = round_costs(baselines)
    total = sum(costs.values()) or 1.0
    policies = {}
    for label, cost in costs.items():
        share = max(0.0, left_s) * cost / total
        fits = int(share // cost) if cost > 0 else CONFIRMATION.min_rounds
        policies[label] = replace(
            CONFIRMATION, min_rounds=max(FINAL_MIN_ROUNDS, min(CONFIRMATION.min_rounds, fits)),
            max_seconds=max(0.5, min(CONFIRMATION.max_seconds, share)),
            warmup_calls=0 if fits < CONFIRMATION.min_rounds else CONFIRMATION.warmup_calls)
    return ClosingPlan(baselines, policies, dropped)


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
            "samples": table.samples,
            "roofline_fraction": table.roofline_fraction("champion"),
        })
    return {"champion": champion.id if champion else None,
            "champion_dir": str(where) if where else None, "shapes": shapes}


def _as_tuple(estimate: Any) -> tuple[float, float, float]:
    values = (estimate.median, estimate.low, estimate.high)
    return tuple(v if math.isfinite(v) else float("nan") for v in values)  # type: ignore[return-value]
