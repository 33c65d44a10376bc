"""Whose turn it is: agents in order, a first agent keeping the turn, benched ones sitting
out, the fallback when every agent is dry or exploration is asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarmfab.swarm.supervisor import Intervention
from swarmfab.swarm.turns import Turns


@dataclass
class Scripted:
    """An agent that proposes the names it still has, one per turn."""

    id: str
    left: int
    first: bool = False


def ask(agent: Any, context: Any) -> list[Any]:
    if agent.left <= 0:
        return []
    agent.left -= 1
    return [f"{agent.id}-{agent.left}"]


def order(turns: Turns, count: int) -> list[str | None]:
    picks = [turns.next(ask, lambda agent: None) for _ in range(count)]
    return [pick[0].id if pick else None for pick in picks]


def test_agents_take_turns_and_a_first_one_keeps_it_while_it_proposes() -> None:
    starting, a, b = Scripted("starting", 2, first=True), Scripted("a", 9), Scripted("b", 9)
    assert order(Turns([starting, a, b]), 6) == ["starting", "starting", "a", "b", "a", "b"]


def test_a_first_agent_waiting_on_its_last_move_is_asked_again_before_the_others() -> None:
    """A starting point waits for its last move's verdict (it passes meanwhile); once it
    can propose again it does, not after a whole round of the other agents."""
    llm, starting, a, b, c = (Scripted("llm", 9), Scripted("starting", 1, first=True),
                              Scripted("a", 9), Scripted("b", 9), Scripted("c", 9))
    turns = Turns([llm, starting, a, b, c])
    # an agent listed before it leads; its move is then in flight: it passes
    assert order(turns, 3) == ["llm", "starting", "a"]
    starting.left = 1  # the verdict is in: the next move is ready
    assert order(turns, 3) == ["starting", "b", "c"]
    # while it waits it is asked once a call, not again when the rotation reaches it
    asked: list[str] = []

    def counting(agent: Any, context: Any) -> list[Any]:
        asked.append(agent.id)
        return ask(agent, context)

    for _ in range(len(turns.agents)):
        turns.next(counting, lambda agent: None)
    assert asked.count("starting") == len(turns.agents)


def test_the_fallback_is_asked_when_every_agent_is_dry_and_first_when_exploring() -> None:
    a, fallback = Scripted("a", 1), Scripted("restart", 3)
    turns = Turns([a], fallback)
    assert order(turns, 2) == ["a", "restart"]
    turns.follow(Intervention("explore", "no new champion", turns=1))
    a.left = 5
    assert order(turns, 2) == ["restart", "a"]
    assert order(Turns([Scripted("dry", 0)]), 1) == [None]  # no fallback: nothing


def test_a_benched_agent_sits_out_its_turns() -> None:
    a, b = Scripted("a", 9), Scripted("b", 9)
    turns = Turns([a, b])
    turns.follow(Intervention("bench-agent", "keeps proposing what is taken", agent="a", turns=2))
    assert order(turns, 4) == ["b", "b", "a", "b"]
