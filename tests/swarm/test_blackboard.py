"""The blackboard: one evaluator per candidate, leases that expire, events in order."""

from __future__ import annotations

import threading

from swarmfab.swarm.blackboard import Blackboard, Event


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_claimed_candidate_cannot_be_claimed_by_another_until_the_lease_ends() -> None:
    clock = FakeClock()
    board = Blackboard(lease_s=10, clock=clock)
    assert board.claim("c1", "tiling")
    assert not board.claim("c1", "compiler")
    assert board.claim("c1", "tiling")  # the holder may renew
    clock.now = 11  # the holder died: its lease ran out
    assert board.claim("c1", "compiler")


def test_a_judged_candidate_is_never_claimed_again() -> None:
    board = Blackboard()
    board.mark_judged(frozenset({"old"}))
    assert not board.claim("old", "a")
    assert board.claim("new", "a")
    board.release("new", judged=True)
    assert not board.claim("new", "b")
    assert board.claim("retry", "a")
    board.release("retry", judged=False)  # e.g. a worker crash before any verdict
    assert board.claim("retry", "b")


def test_no_candidate_is_claimed_twice_under_concurrency() -> None:
    board = Blackboard()
    ids = [f"c{i}" for i in range(200)]
    won: dict[str, list[str]] = {}
    lock = threading.Lock()
    start = threading.Barrier(8)

    def agent(name: str) -> None:
        start.wait()
        for candidate in ids:
            if board.claim(candidate, name):
                with lock:
                    won.setdefault(candidate, []).append(name)
                board.release(candidate, judged=True)

    threads = [threading.Thread(target=agent, args=(f"agent-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won) == sorted(ids)
    assert all(len(owners) == 1 for owners in won.values())


def test_subscribers_receive_events_of_their_kind_in_order() -> None:
    board = Blackboard()
    seen: list[Event] = []
    everything: list[str] = []
    board.subscribe("champion-changed", seen.append)
    board.subscribe("*", lambda event: everything.append(event.kind))
    board.publish("champion-changed", "c1")
    board.publish("corpus-grew", "fuzz-1")
    board.publish("champion-changed", "c2")
    assert [event.detail for event in seen] == ["c1", "c2"]
    assert everything == ["champion-changed", "corpus-grew", "champion-changed"]
    assert [e.detail for e in board.events("corpus-grew")] == ["fuzz-1"]
