"""The gate: the conjunctive rule a verdict must pass to become champion.

Correct on every validation case and every target shape (the verdict is ``accepted``),
faster than the incumbent with statistical support on at least one target shape, and
regressing on none: no shape may be slower with statistical support, nor have a median
ratio worse than the regression epsilon (a noisy measurement whose interval happens to
include 1 does not excuse a median that says slower). Comparisons come from confidence
intervals of paired ratios, never from single means.

A shape on which the move runs the same code as the incumbent (``same_code``: the design
space knows which knobs a call never reads, :meth:`DesignSpace.same_code_on`) is left out
of the decision: its reading can only be a difference between two processes, and a
10-minute run crowned such a tie at 1.11x (a tile knob, at B64 decode where no tile is
used) while another read 0.77x for the move back.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from swarmfab.evaluation import REGRESSION_EPSILON
from swarmfab.kernels import DesignSpace
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.workloads import Case

__all__ = ["GateDecision", "judge", "same_code_shapes"]


@dataclass(frozen=True, slots=True)
class GateDecision:
    promote: bool
    reason: str


def judge(verdict: Verdict, same_code: Collection[str] = ()) -> GateDecision:
    """The gate's decision; ``same_code``: labels of shapes where the candidate runs the
    incumbent's code (see the module's docstring)."""
    if verdict.status is not Status.ACCEPTED:
        return GateDecision(False, f"not verified ({verdict.status.value})")
    timings = [t for t in verdict.timings if t.shape not in same_code]
    if not verdict.timings:
        return GateDecision(False, "no timings on the target shapes")
    if not timings:
        return GateDecision(False, "the move changes no code a target shape runs")
    slower = [
        t.shape for t in timings
        if t.comparison == "slower" or t.ratio.median > 1 + REGRESSION_EPSILON
    ]
    if slower:
        return GateDecision(False, f"regresses on {', '.join(slower)}")
    faster = [t for t in timings if t.comparison == "faster"]
    if not faster:
        return GateDecision(False, "not faster than the incumbent with statistical support")
    gains = ", ".join(f"{t.shape}: {t.ratio.inverted().median:.2f}x" for t in faster)
    return GateDecision(True, f"faster on {len(faster)}/{len(timings)} shapes ({gains})")


def same_code_shapes(space: DesignSpace, candidate: Candidate, champion: Candidate | None,
                     targets: Sequence[Case]) -> list[str]:
    """Labels of the target shapes on which ``candidate`` runs ``champion``'s code (its
    knobs differ only in ones those calls never read); none without a champion."""
    if champion is None or not (candidate.knobs and champion.knobs):
        return []
    return [case.shape.label for case in targets
            if space.same_code_on(candidate.knobs, champion.knobs, case.shape)]
