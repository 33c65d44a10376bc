"""Champions across generations: which are current, which stale, and who succeeded whom.

``swarmfab refresh`` records every check of a champion on a later host or software
(:class:`~swarmfab.knowledge._schema.RefreshRow`); a stale champion's short new run is
its successor. This module reads those records back for ``show``, ``runs`` and the
report. Nothing here measures anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from swarmfab.knowledge.store import Store

__all__ = ["Generation", "Generations"]


@dataclass(frozen=True, slots=True)
class Generation:
    """Where one run's champion stands."""

    run_id: str
    state: str  # "current", "stale" or "unchecked" (never refreshed)
    reasons: tuple[str, ...]
    checked_at: datetime | None
    predecessor: str | None  # the run whose stale champion this run succeeded
    successor: str | None  # the run that succeeded this run's stale champion

    def describe(self) -> str:
        if self.state == "unchecked":
            text = "not refreshed since its run"
        else:
            when = self.checked_at.strftime("%Y-%m-%d %H:%M") if self.checked_at else "?"
            text = f"{self.state} (checked {when})"
            if self.reasons:
                text += ": " + "; ".join(self.reasons)
        if self.successor:
            text += f"; succeeded by run {self.successor}"
        return text


class Generations:
    """Every refresh in a store, read once."""

    def __init__(self, store: Store):
        self._rows = store.refreshes()

    def of(self, run_id: str) -> Generation:
        mine = [row for row in self._rows if row.run_id == run_id]
        latest = mine[-1] if mine else None
        successor = next((row.successor_run_id for row in reversed(mine)
                          if row.successor_run_id), None)
        predecessor = next((row.run_id for row in self._rows
                            if row.successor_run_id == run_id), None)
        if latest is None:
            return Generation(run_id, "unchecked", (), None, predecessor, successor)
        return Generation(run_id, latest.state, tuple(latest.reasons), latest.checked_at,
                          predecessor, successor)

    def succeeded(self, run_id: str) -> bool:
        return any(row.run_id == run_id and row.successor_run_id for row in self._rows)

    def lineage(self, run_id: str) -> list[str]:
        """The runs of this champion's line, first generation first, ``run_id`` among them."""
        line = [run_id]
        while (before := self.of(line[0]).predecessor) is not None and before not in line:
            line.insert(0, before)
        while (after := self.of(line[-1]).successor) is not None and after not in line:
            line.append(after)
        return line
