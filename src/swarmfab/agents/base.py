"""The Agent protocol, shared by built-in agents and (later) LLM agents.

The run loop calls ``propose(context)`` on one agent at a time; an agent returns
candidates it wants evaluated, best first. Agents never evaluate, store or decide on a
champion themselves: they read the context and propose. The context is rebuilt for every
call, so an agent that keeps its own memory must treat the context as the truth.
"""

from __future__ import annotations

import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from swarmfab.goal import Goal
from swarmfab.kernels import DesignSpace, KnobValue
from swarmfab.records import Candidate, Lesson, Verdict

__all__ = ["Agent", "Context", "SearchGoal", "fresh_candidates"]


class SearchGoal(Protocol):
    """What the built-in agents read of any goal they search for (an engine goal too)."""

    @property
    def threads(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Context:
    """What an agent may know when it proposes."""

    goal: Goal | SearchGoal  # builtin agents read only .threads; LLM agents need a Goal
    space: DesignSpace
    champion: Candidate | None
    evaluated: frozenset[str]  # judged in this run, or being evaluated now
    recent: tuple[Verdict, ...] = ()
    lessons: tuple[Lesson, ...] = ()  # from earlier runs, most useful first; .text() reads
    rng: random.Random = field(default_factory=random.Random)
    parents: tuple[Candidate, ...] = ()  # elites sampled from the agent's island
    champion_verdict: Verdict | None = None  # the evidence behind the champion
    board: tuple[str, ...] = ()  # the blackboard's recent events, oldest first
    in_flight: frozenset[str] = frozenset()  # being evaluated now: no verdict yet
    # time.monotonic() by which proposing must be over (the search's end); None: no limit.
    # An agent that waits on something slow (a remote model) bounds its wait by it.
    deadline: float | None = None

    def seconds_left(self) -> float:
        """Until :attr:`deadline` (infinite without one)."""
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def champion_setting(self) -> dict[str, KnobValue]:
        """The champion's knobs, or the space's default before any champion exists."""
        if self.champion is not None and self.champion.knobs:
            return dict(self.champion.knobs)
        return self.space.default()


class Agent(ABC):
    """A proposer that owns one domain (``role``) of a design space.

    ``first``: when its turn comes, the agent keeps it for as long as it proposes
    (known-good moves measured one after another before the search goes on, as a study
    runs its enqueued trials first); the others give the turn on after each proposal."""

    first: bool = False

    def __init__(self, agent_id: str, role: str):
        self.id = agent_id
        self.role = role

    @abstractmethod
    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        """Up to ``limit`` candidates not in ``context.evaluated``; [] when out of ideas."""

    def may_propose_later(self) -> bool:
        """True if an empty proposal is only for now (an LLM agent waiting out a provider
        failure), so the run goes on; built-in agents with nothing are done."""
        return False

    def take_events(self) -> list[tuple[str, str]]:
        """(kind, detail) of what the agent did since last asked (calls, spend, errors);
        the run loop records them. Built-in agents have none."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, role={self.role!r})"


def fresh_candidates(
    context: Context, settings: Iterable[tuple[dict[str, KnobValue], str]], *, agent: str,
    parents: tuple[str, ...] = (), limit: int = 1,
) -> list[Candidate]:
    """Up to ``limit`` candidates rendered from (setting, rationale) pairs, in order,
    skipping any already judged or in flight and any repeat among them (two settings
    that differ only in knobs the template ignores are one candidate)."""
    proposals: list[Candidate] = []
    seen = set(context.evaluated)
    for setting, why in settings:
        candidate = context.space.instantiate(setting, threads=context.goal.threads,
                                              parents=parents, agent=agent, rationale=why)
        if candidate.id in seen:
            continue
        seen.add(candidate.id)
        proposals.append(candidate)
        if len(proposals) >= limit:
            break
    return proposals
