"""How the sandbox held across verdicts, for ``swarmfab show`` and ``swarmfab report``:
how many verdicts at each level, and the weakest isolation any candidate ran under."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from swarmfab.records import Verdict

__all__ = ["isolation_summary"]

_WEAKEST_FIRST = ("none", "partial", "off", "", "full")


def isolation_summary(verdicts: Iterable[Verdict]) -> dict[str, Any]:
    """``by_level`` (verdicts per level; "not recorded" where a verdict has none: its
    candidate never ran, or it predates the record), ``weakest`` (the weakest recorded
    isolation, described) and ``describe`` (one line)."""
    judged = list(verdicts)
    levels = Counter(v.isolation.level or "not recorded" for v in judged)
    recorded = [v for v in judged if v.isolation.level]
    weakest = min(recorded, key=lambda v: _WEAKEST_FIRST.index(v.isolation.level)
                  if v.isolation.level in _WEAKEST_FIRST else 0, default=None)
    if weakest is None:
        line = "not recorded"
    elif levels.get("full", 0) == len(recorded):
        line = (f"full in all {len(recorded)} verdict(s) that ran code: "
                f"{weakest.isolation.describe()}")
    else:
        line = (f"{weakest.isolation.level} in {levels[weakest.isolation.level]} of "
                f"{len(recorded)} verdict(s) that ran code: {weakest.isolation.describe()}")
    return {"by_level": dict(levels),
            "weakest": None if weakest is None else weakest.isolation.describe(),
            "describe": line}
