"""The highest request rate an engine sustains within the objective.

DistServe's definition of goodput: the largest arrival rate at which a set share of the
requests (the *attainment*, 90% by default) meets every latency objective. Requests
dropped or cut short count as missing it (:mod:`~swarmfab.engine.loadgen`). Unlike
requests per second at one offered load, it cannot be raised by refusing work or by
serving a light load well: the rate itself is the answer.

The search probes open-loop arrivals: from a starting rate it doubles while the
attainment holds (or halves until it does), then bisects the bracket geometrically for a
few steps. Each probe is one load run, so a search costs a handful of them; a probe is a
measurement on a noisy host, and the search takes each at its word (a rate that passes
once counts as sustained), so compare two engines by repeating searches in alternation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RateSearch", "sustained_rate"]


@dataclass(slots=True)
class RateSearch:
    """A search's answer and its probes: (rate, attainment) in the order measured."""

    rate: float = 0.0
    probes: list[tuple[float, float]] = field(default_factory=list)
    capped: bool = False  # the highest rate probed still held: the answer is a floor


def sustained_rate(attainment_at: Callable[[float], float], start: float, target: float,
                   *, steps: int = 4, span: int = 6) -> RateSearch:
    """The highest rate whose attainment (``attainment_at(rate)``, 0-1) is at least
    ``target``: doubling or halving from ``start`` at most ``span`` times to bracket it,
    then ``steps`` geometric bisections. 0 when even ``start / 2**span`` misses."""
    if not (start > 0 and math.isfinite(start)):
        raise ValueError(f"the starting rate must be a positive number, got {start}")
    if not 0 < target <= 1:
        raise ValueError(f"the attainment target must lie in (0, 1], got {target}")
    search = RateSearch()

    def holds(rate: float) -> bool:
        attained = attainment_at(rate)
        search.probes.append((rate, attained))
        return attained >= target

    low: float | None
    high: float | None
    if holds(start):
        low, high = start, None
        for _ in range(span):
            if not holds(2 * low):
                high = 2 * low
                break
            low *= 2
        if high is None:
            search.rate, search.capped = low, True
            return search
    else:
        low, high = None, start
        for _ in range(span):
            if holds(high / 2):
                low = high / 2
                break
            high /= 2
        if low is None:
            return search
    for _ in range(steps):
        middle = math.sqrt(low * high)
        if holds(middle):
            low = middle
        else:
            high = middle
    search.rate = low
    return search
