"""The supervisor redirects a stagnating search and benches an agent that keeps failing."""

from __future__ import annotations

from swarmfab.records import Status, Verdict
from swarmfab.swarm.supervisor import Supervisor


def _verdict(status: Status, reason: str = "verified") -> Verdict:
    return Verdict("c" * 16, status, reason)


def test_no_new_champion_for_a_while_asks_for_exploration() -> None:
    supervisor = Supervisor(patience=3)
    accepted = _verdict(Status.ACCEPTED)
    assert supervisor.observe("a", accepted, promoted=False) is None
    assert supervisor.observe("a", accepted, promoted=False) is None
    intervention = supervisor.observe("a", accepted, promoted=False)
    assert intervention is not None and intervention.kind == "explore"
    assert "3 evaluations" in intervention.reason


def test_a_new_champion_resets_the_patience() -> None:
    supervisor = Supervisor(patience=2)
    accepted = _verdict(Status.ACCEPTED)
    assert supervisor.observe("a", accepted, promoted=False) is None
    assert supervisor.observe("a", accepted, promoted=True) is None
    assert supervisor.observe("a", accepted, promoted=False) is None


def test_the_same_failure_again_and_again_benches_the_agent() -> None:
    supervisor = Supervisor(patience=100, repeated_failures=3)
    failure = _verdict(Status.BUILD_FAILED, "compilation failed: x.c:3: error: boom")
    assert supervisor.observe("tiling", failure, promoted=False) is None
    assert supervisor.observe("tiling", failure, promoted=False) is None
    intervention = supervisor.observe("tiling", failure, promoted=False)
    assert intervention is not None and intervention.kind == "bench-agent"
    assert intervention.agent == "tiling" and "build_failed" in intervention.reason


def test_different_failures_do_not_bench_anyone() -> None:
    supervisor = Supervisor(patience=100, repeated_failures=2)
    assert supervisor.observe("a", _verdict(Status.CRASHED, "killed"), promoted=False) is None
    assert supervisor.observe("a", _verdict(Status.REJECTED, "case x"), promoted=False) is None


def test_an_agent_proposing_what_is_taken_again_and_again_is_benched() -> None:
    supervisor = Supervisor(repeated_proposals=3, turns=5)
    assert supervisor.refused("llm-tiling", "aaaa") is None
    assert supervisor.refused("llm-tiling", "bbbb") is None
    intervention = supervisor.refused("llm-tiling", "cccc")
    assert intervention is not None and intervention.kind == "bench-agent"
    assert intervention.agent == "llm-tiling" and intervention.turns == 5
    assert "judged or in flight already" in intervention.reason
    assert supervisor.refused("llm-tiling", "dddd") is None  # counting starts again
