"""The archive: elites per behaviour cell (MAP-Elites), spread over islands, with lineage.

A candidate's cell is its behaviour descriptor (backend and the design choices that
change how it works, e.g. algorithm and parallel mapping); each island keeps the best
candidate per cell, and its own champion. Islands evolve apart and exchange their best
every ``migrate_every`` additions, so one lucky lineage does not take over the search.
Fitness is speed relative to the baselines (higher is better).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from swarmfab.records import Candidate, Status, Verdict

__all__ = ["Archive", "Elite", "fitness_of", "knob_descriptor"]

Descriptor = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Elite:
    candidate: Candidate
    fitness: float
    island: int


def knob_descriptor(knobs: tuple[str, ...]) -> Callable[[Candidate], Descriptor]:
    """A descriptor from the backend and the named knobs (missing knobs count as '-')."""

    def describe(candidate: Candidate) -> Descriptor:
        return (candidate.backend, *(str(candidate.knobs.get(k, "-")) for k in knobs))

    return describe


def fitness_of(verdict: Verdict, gain: float) -> float | None:
    """A verified candidate's speed relative to the baselines: the geometric mean of its
    speedups over the incumbent it was timed against, times that incumbent's ``gain``
    over the baselines; None for a verdict without timings."""
    if verdict.status is not Status.ACCEPTED or not verdict.timings:
        return None
    speedups = [t.ratio.inverted().median for t in verdict.timings]
    return gain * math.exp(sum(math.log(s) for s in speedups) / len(speedups))


class Archive:
    """Islands of MAP-Elites cells. Not thread-safe: the run loop owns it."""

    def __init__(self, describe: Callable[[Candidate], Descriptor], islands: int = 2,
                 migrate_every: int = 8):
        self.describe, self.migrate_every = describe, migrate_every
        self.cells: list[dict[Descriptor, Elite]] = [{} for _ in range(islands)]
        self.parents: dict[str, tuple[str, ...]] = {}
        self._additions = 0

    @property
    def islands(self) -> int:
        return len(self.cells)

    def add(self, candidate: Candidate, fitness: float, island: int) -> bool:
        """Offer a verified candidate; True if it became the elite of its cell."""
        self.parents[candidate.id] = candidate.parents
        cells = self.cells[island % self.islands]
        cell = self.describe(candidate)
        current = cells.get(cell)
        improved = current is None or fitness > current.fitness
        if improved:
            cells[cell] = Elite(candidate, fitness, island % self.islands)
        self._additions += 1
        if self._additions % self.migrate_every == 0:
            self.migrate()
        return improved

    def champion(self, island: int | None = None) -> Elite | None:
        """The fittest elite of one island, or of all."""
        pools = self.cells if island is None else [self.cells[island % self.islands]]
        elites = [elite for cells in pools for elite in cells.values()]
        return max(elites, key=lambda e: e.fitness, default=None)

    def migrate(self) -> None:
        """Each island's champion joins the next island (ring), if it improves a cell there."""
        champions = [self.champion(i) for i in range(self.islands)]
        for index, elite in enumerate(champions):
            if elite is None:
                continue
            target = self.cells[(index + 1) % self.islands]
            cell = self.describe(elite.candidate)
            if cell not in target or elite.fitness > target[cell].fitness:
                target[cell] = Elite(elite.candidate, elite.fitness, (index + 1) % self.islands)

    def sample(self, island: int, rng: random.Random, count: int = 1) -> list[Candidate]:
        """Parents for an agent of ``island``: elites drawn with preference for the fit."""
        elites = sorted(self.cells[island % self.islands].values(), key=lambda e: -e.fitness)
        if not elites:
            return []
        weights = [1.0 / (rank + 1) for rank in range(len(elites))]
        picks = rng.choices(elites, weights=weights, k=count)
        return [elite.candidate for elite in picks]

    def lineage(self, candidate_id: str) -> list[str]:
        """The candidate, its first parent, that parent's first parent, ... (oldest last)."""
        chain = [candidate_id]
        while (parents := self.parents.get(chain[-1])) and len(chain) < 10_000:
            chain.append(parents[0])
        return chain

    def summary(self) -> list[dict[str, object]]:
        """Every elite, for reports: island, cell, candidate and fitness."""
        return [
            {"island": i, "cell": list(cell), "candidate": elite.candidate.id,
             "fitness": elite.fitness}
            for i, cells in enumerate(self.cells) for cell, elite in sorted(cells.items())
        ]
