"""The blackboard: who is evaluating what (claims with leases), and what happened (events).

Claims make "never evaluate the same canonical candidate twice" hold when several agents
or workers propose at once: a candidate is claimed before evaluation and marked judged
after; a claim whose lease ran out (its worker died) can be taken over. Events (champion
changed, corpus grew, supervisor intervened) are delivered to subscribers in order.
Thread-safe; one blackboard per run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Blackboard", "Event"]


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # "champion-changed", "corpus-grew", "intervention", "demoted", ...
    detail: str
    at: float


@dataclass(frozen=True, slots=True)
class _Claim:
    owner: str
    expires: float


class Blackboard:
    """Claims on candidate ids and a log of events, shared by a run's agents and workers."""

    def __init__(self, lease_s: float = 900.0, clock: Callable[[], float] = time.monotonic):
        self.lease_s, self._clock = lease_s, clock
        self._lock = threading.Lock()
        self._claims: dict[str, _Claim] = {}
        self._judged: set[str] = set()
        self._events: list[Event] = []
        self._subscribers: list[tuple[str, Callable[[Event], None]]] = []

    def mark_judged(self, candidate_ids: set[str] | frozenset[str]) -> None:
        """Candidates with a verdict already (e.g. from the store, when resuming)."""
        with self._lock:
            self._judged.update(candidate_ids)

    def judged(self) -> frozenset[str]:
        """Every candidate with a verdict in this run."""
        with self._lock:
            return frozenset(self._judged)

    def taken(self) -> frozenset[str]:
        """Candidates no one should propose now: judged, or held by a live claim."""
        now = self._clock()
        with self._lock:
            live = {cid for cid, claim in self._claims.items() if claim.expires > now}
            return frozenset(self._judged | live)

    def claimed(self) -> frozenset[str]:
        """Candidates held by a live claim (being evaluated now)."""
        now = self._clock()
        with self._lock:
            return frozenset(cid for cid, claim in self._claims.items() if claim.expires > now)

    def claim(self, candidate_id: str, owner: str) -> bool:
        """True if ``owner`` may evaluate ``candidate_id`` now (nobody judged or holds it)."""
        now = self._clock()
        with self._lock:
            if candidate_id in self._judged:
                return False
            held = self._claims.get(candidate_id)
            if held is not None and held.owner != owner and held.expires > now:
                return False
            self._claims[candidate_id] = _Claim(owner, now + self.lease_s)
            return True

    def release(self, candidate_id: str, *, judged: bool) -> None:
        """Drop a claim; ``judged`` candidates can never be claimed again."""
        with self._lock:
            self._claims.pop(candidate_id, None)
            if judged:
                self._judged.add(candidate_id)

    def subscribe(self, kind: str, callback: Callable[[Event], None]) -> None:
        """Call ``callback`` for every event of ``kind`` ("*" for all), after publication."""
        with self._lock:
            self._subscribers.append((kind, callback))

    def publish(self, kind: str, detail: str) -> Event:
        event = Event(kind, detail, self._clock())
        with self._lock:
            self._events.append(event)
            listeners = [cb for k, cb in self._subscribers if k in ("*", kind)]
        for callback in listeners:  # outside the lock: a listener may publish in turn
            callback(event)
        return event

    def events(self, kind: str | None = None) -> list[Event]:
        with self._lock:
            return [e for e in self._events if kind is None or e.kind == kind]
