"""Fuzzing: fresh random cases added to the corpus cases of every evaluation.

A draw that breaks a candidate is a counterexample: the run stores it in the corpus,
replays it against every later candidate and re-checks the current champion on it
("the validation data improves itself"). What to draw is the workload's business
(:meth:`Workload.fuzz_cases`); names carry the seed so every failure is reproducible.
"""

from __future__ import annotations

import random

from swarmfab.workloads import Case, Workload

__all__ = ["draw_cases"]


def draw_cases(workload: Workload, rng: random.Random, count: int) -> list[Case]:
    """``count`` fresh cases for ``workload`` (none if it declares no fuzzing)."""
    return workload.fuzz_cases(rng, count)
