"""Recall: earlier champions' whole settings, ranked by context, proposed first."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from swarmfab.agents import Context
from swarmfab.agents.builtin import RecallAgent
from swarmfab.goal import default_goal
from swarmfab.knowledge import LessonContext, Store
from swarmfab.knowledge.recall import Champion, project, recall_champions
from swarmfab.records import Estimate, ShapeTiming, Status, Verdict
from swarmfab.workloads import design_space

HOST = {"machine": "x86_64", "threads": 2, "isa": "x86_64 avx avx2 avx512f fma"}
OTHER_CPU = {"machine": "aarch64", "threads": 2, "isa": "aarch64"}
SMALL, DECODE = "B1 T256 H4 K64 V64", "B64 T1 H16 K128 V128 +h0"
T0 = datetime(2026, 1, 1)


def _champion(run: str, workload: str, knobs: dict[str, object], host: dict[str, object] = HOST,
              shape: str = SMALL, age_days: int = 0) -> Champion:
    return Champion(run, workload, host, (shape,), knobs,  # type: ignore[arg-type]
                    T0 - timedelta(days=age_days))


def test_recall_ranks_by_similarity_then_recency_and_drops_duplicates() -> None:
    asking = LessonContext.of("kda", HOST, [SMALL])
    champions = [
        _champion("gdn-run", "gdn", {"tile_v": 16}),
        _champion("old-kda", "kda", {"tile_v": 32}, age_days=3),
        _champion("new-kda", "kda", {"tile_v": 64}),
        _champion("same-as-new", "kda", {"tile_v": 64}, age_days=1),
        _champion("decode-kda", "kda", {"tile_v": 8}, shape=DECODE),
        _champion("arm-kda", "kda", {"tile_v": 128}, host=OTHER_CPU),
        _champion("hand-written", "kda", {}),
        _champion("other-family", "attention", {"tile_v": 16}),
    ]
    recalled = recall_champions(champions, asking, limit=10)
    assert [item.run_id for item in recalled] == [
        "new-kda", "old-kda", "gdn-run", "decode-kda", "arm-kda"]
    assert recalled[0].similarity == 1.0 and recalled[2].similarity == 0.8
    assert recalled[0].context == "kda | cpu-x86_64-avx512-t2_4 | prefill-s"
    assert [item.run_id for item in recall_champions(champions, asking, limit=2)] == [
        "new-kda", "old-kda"]


def test_a_champion_a_refresh_found_broken_is_recalled_after_every_other() -> None:
    asking = LessonContext.of("kda", HOST, [SMALL])
    broken = dataclasses.replace(_champion("broken", "kda", {"tile_v": 64}),
                                 failed_refresh=True)
    farther = _champion("arm-kda", "kda", {"tile_v": 128}, host=OTHER_CPU, age_days=5)
    assert [item.run_id for item in recall_champions([broken, farther], asking)] == [
        "arm-kda", "broken"]


def test_project_keeps_valid_values_and_defaults_the_rest() -> None:
    space = design_space("gdn")
    setting = project({"tile_v": 64, "algorithm": "recurrent", "chunk": 7, "gone": 1}, space)
    assert setting == {**space.default(), "tile_v": 64, "algorithm": "recurrent"}


def test_the_recall_agent_proposes_each_setting_once_then_stops() -> None:
    space, goal = design_space("kda"), default_goal("kda").with_overrides(threads=1)
    asking = LessonContext.of("kda", HOST, [SMALL])
    recalled = recall_champions([
        _champion("a", "kda", {"algorithm": "recurrent", "decay": "eager"}),
        _champion("b", "gdn", {"algorithm": "recurrent", "tile_v": 64})], asking)
    agent = RecallAgent(recalled)
    evaluated: set[str] = set()
    proposals = []
    for _ in range(3):
        found = agent.propose(Context(goal, space, None, frozenset(evaluated)))
        evaluated.update(candidate.id for candidate in found)
        proposals += found
    assert [c.knobs["decay"] for c in proposals] == ["eager", "deferred"]  # b: the default
    assert proposals[1].knobs["tile_v"] == 64 and proposals[0].parents == ()
    assert "recalled: champion of run a" in proposals[0].rationale


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_store_recalls_champions_of_finished_runs(
    tmp_path: Path, dialect: str, request: pytest.FixtureRequest
) -> None:
    """Recall reads the champions' knobs from inside the stored JSON, in either dialect."""
    space = design_space("kda")
    store = Store(request.getfixturevalue("postgres_url") if dialect == "postgresql"
                  else tmp_path / "x.db")
    run = store.start_run("kda", {"workload": "kda"}, HOST)
    candidate = space.instantiate({**space.default(), "algorithm": "recurrent"}, threads=2)
    time = Estimate(1e-3, 0.9e-3, 1.1e-3)
    store.record(run, candidate, Verdict(candidate.id, Status.ACCEPTED, "verified", timings=(
        ShapeTiming(SMALL, "torch-recurrent", time, time.scaled(5), Estimate(0.2, 0.19, 0.21),
                    "faster", 10),)))
    assert store.recall(LessonContext.of("gdn", HOST, [SMALL])) == []  # no champion yet
    store.set_champion(run, candidate.id)
    [recalled] = store.recall(LessonContext.of("gdn", HOST, [SMALL]))
    assert recalled.run_id == run and recalled.knobs == candidate.knobs
    assert recalled.context == "kda | cpu-x86_64-avx512-t2_4 | prefill-s"
    assert store.recall(LessonContext.of("attention", HOST, [SMALL])) == []
