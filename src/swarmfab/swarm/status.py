"""A live picture of a run, for progress displays: counts, reasons, champion, budget.

The run feeds a :class:`StatusTracker` as it goes; displays receive immutable
:class:`RunStatus` snapshots and never reach back into the run.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from swarmfab.records import ShapeTiming, Status, Verdict

__all__ = ["RunStatus", "StatusTracker"]


@dataclass(frozen=True, slots=True)
class RunStatus:
    run_id: str
    phase: str
    elapsed_s: float
    budget_s: float
    evaluations: int
    per_minute: float
    counts: dict[str, int]
    top_reasons: list[tuple[str, int]]
    champion: str | None
    # per target shape: (shape, speedup vs the fastest baseline, low, high, roofline fraction)
    champion_shapes: list[tuple[str, float, float, float, float | None]]
    activity: dict[str, str] = field(default_factory=dict)  # agent -> what it did last


class StatusTracker:
    """Accumulates what a run has done; :meth:`snapshot` gives a display a copy."""

    def __init__(self, budget_s: float, started: float | None = None):
        self.budget_s = budget_s
        self.started = time.monotonic() if started is None else started
        self.run_id, self.phase = "", "starting"
        self.evaluations = 0
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.champion: str | None = None
        # the champion's speedup over the baselines: the product of each crowning's gain
        self._gain: dict[str, tuple[float, float, float]] = {}
        self._roofline: dict[str, float | None] = {}
        self.activity: dict[str, str] = {}

    def evaluated(self, agent: str, candidate: str, verdict: Verdict, promoted: bool) -> None:
        self.evaluations += 1
        self.counts[verdict.status.value] += 1
        if verdict.status is not Status.ACCEPTED:
            self.reasons[verdict.reason.split(":")[0][:60]] += 1
        note = "new champion" if promoted else verdict.status.value
        self.activity[agent] = f"{candidate[:10]}: {note}"
        if promoted:
            self.crowned(candidate, verdict.timings)

    def crowned(self, candidate: str, timings: tuple[ShapeTiming, ...]) -> None:
        self.champion = candidate
        for timing in timings:
            speed = timing.ratio.inverted()
            before = self._gain.get(timing.shape, (1.0, 1.0, 1.0))
            self._gain[timing.shape] = (before[0] * speed.median, before[1] * speed.low,
                                        before[2] * speed.high)
            self._roofline[timing.shape] = timing.roofline_fraction

    def demoted(self) -> None:
        self.champion = None
        self._gain.clear()
        self._roofline.clear()

    def snapshot(self) -> RunStatus:
        elapsed = time.monotonic() - self.started
        shapes = [(shape, *gain, self._roofline.get(shape)) for shape, gain in self._gain.items()]
        return RunStatus(
            run_id=self.run_id, phase=self.phase, elapsed_s=elapsed, budget_s=self.budget_s,
            evaluations=self.evaluations,
            per_minute=60 * self.evaluations / elapsed if elapsed > 0 else math.nan,
            counts=dict(self.counts), top_reasons=self.reasons.most_common(3),
            champion=self.champion, champion_shapes=shapes, activity=dict(self.activity),
        )
