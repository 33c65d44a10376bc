"""Lessons: drawn from single-knob child/parent pairs, merged by context, used as priors."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.agents import Context
from swarmfab.agents.builtin import LocalSearchAgent
from swarmfab.cli import app
from swarmfab.goal import default_goal
from swarmfab.kernels import DesignSpace, Knob, Setting
from swarmfab.knowledge import LessonContext, Store
from swarmfab.knowledge.lessons import device_class, extract, merge, shape_class
from swarmfab.records import Candidate, Estimate, Lesson, ShapeTiming, Status, Verdict

HOST = {"machine": "x86_64", "threads": 2, "isa": "x86_64 avx avx2 avx512f fma"}
SHAPE = "B1 T256 H4 K64 V64"  # prefill-s


def _render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
    text = "".join(f"#define {name.upper()} {value}\n" for name, value in setting.items())
    return {"k.c": text + f"/* {threads} threads */\n"}, "k.c", ()


@pytest.fixture
def space() -> DesignSpace:
    """A small space in four domains, every knob rendered (lessons know only knob names)."""
    return DesignSpace("toy", "kda", "c", (
        Knob("passes", "algorithm", ("fused", "separate"), "fused"),
        Knob("tile_v", "tiling", (8, 16, 32, 64, 128), 32, ordered=True),
        Knob("parallel", "parallelism", ("serial", "heads", "tiles"), "tiles"),
        Knob("flags", "compiler", ("O3-native", "O3-native-fastmath"), "O3-native"),
    ), _render)


def _make(space: DesignSpace, parent: Candidate | None = None, **changes: object) -> Candidate:
    setting = {**(parent.knobs if parent else space.default()), **changes}
    return space.instantiate(setting, threads=1, parents=(parent.id,) if parent else ())


def _timed(candidate: Candidate, ratio: float, seconds: float = 1e-3,
           incumbent: str = "champion") -> Verdict:
    time = Estimate(seconds, seconds * 0.98, seconds * 1.02)
    return Verdict(candidate.id, Status.ACCEPTED, "verified", timings=(ShapeTiming(
        SHAPE, incumbent, time, time.scaled(1 / ratio), Estimate(ratio, ratio * 0.97,
                                                                 ratio * 1.03),
        "faster" if ratio < 1 else "slower", 10),))


def _failed(candidate: Candidate) -> Verdict:
    return Verdict(candidate.id, Status.REJECTED, "case 'decode': o matches reference failed")


def _run(space: DesignSpace) -> list[tuple[Candidate, Verdict, bool]]:
    """A small run: start, a faster tile (crowned), fast-math rejected, a two-knob move."""
    start = _make(space)
    wider = _make(space, start, tile_v=64)
    fast_math = _make(space, wider, flags="O3-native-fastmath")
    two_knobs = _make(space, wider, passes="separate", parallel="heads")
    serial = _make(space, wider, parallel="serial")
    return [
        (start, _timed(start, 0.5, incumbent="torch-recurrent"), True),
        (wider, _timed(wider, 0.8, seconds=0.8e-3), True),
        (fast_math, _failed(fast_math), False),
        (two_knobs, _timed(two_knobs, 0.7), False),
        (serial, _timed(serial, 1.6), False),
    ]


def test_context_keys() -> None:
    assert device_class(HOST) == "cpu-x86_64-avx512-t2_4"
    assert device_class({"isa": "aarch64", "threads": 64}) == "cpu-aarch64-scalar-t17+"
    assert shape_class("B64 T1 H16 K128 V128 +h0") == "decode"
    assert shape_class("B1 T64 H2 K16 V16") == "prefill-xs"
    assert shape_class(SHAPE) == "prefill-s"
    assert shape_class("B1 T1024 H16 K128 V128") == "prefill-l"
    assert shape_class("B2 T512 H4/HV8 K64 V64") == "prefill-m"
    assert shape_class("M=4 N=8") == "other"


def test_engine_runs_are_classed_by_model_size_and_load() -> None:
    assert shape_class("153M c8 in64 out32") == "engine-s-c8"
    assert shape_class("153M c8 in64 out32 r0.5") == "engine-s-c8"   # lengths spread
    assert shape_class("898K c1 in16 out8") == "engine-xs-c1"
    assert shape_class("1.3M c64 in64 out32") == "engine-xs-c33+"
    assert shape_class("7.2B 4 req/s in64 out32") == "engine-l-open"
    assert shape_class("c8 in64 out32") == "other"  # recorded before runs named the model
    small = LessonContext.of("engine", HOST, ["153M c8 in64 out32"])
    assert small.similarity_to("engine", small.device_class, ["engine-s-c8"]) == 1.0
    assert small.similarity_to("engine", small.device_class, ["engine-s-c32"]) == 0.6
    # a lesson of the 0.9M-parameter test model weighs little on a 153M model's run
    assert small.similarity_to("engine", small.device_class, ["engine-xs-c8"]) == 0.3


def test_extract_keeps_single_knob_pairs_with_their_effect(space: DesignSpace) -> None:
    rows = {row.knob: row for row in extract("r1", "kda", HOST, _run(space))}
    assert set(rows) == {"tile_v", "flags", "parallel"}  # the two-knob move teaches nothing
    tile = rows["tile_v"]
    assert (tile.family, tile.shape_class, tile.from_value, tile.to_value) == (
        "delta-rule", "prefill-s", "32", "64")
    # the start was not the incumbent then (a baseline was): ratio of the two medians
    assert tile.log_ratio == pytest.approx(math.log(0.8))
    assert tile.pairs == 1 and tile.failures == 0
    parallel = rows["parallel"]  # its parent was the champion: the paired ratio is used
    assert parallel.log_ratio == pytest.approx(math.log(1.6))
    assert parallel.evidence[0]["paired"] is True
    flags = rows["flags"]
    assert (flags.log_ratio, flags.pairs, flags.failures) == (None, 0, 1)
    assert flags.evidence[0]["failed"] == "rejected"


def test_merge_weighs_evidence_by_similarity(space: DesignSpace) -> None:
    kda = extract("r1", "kda", HOST, _run(space))
    here = LessonContext.of("kda", HOST, [SHAPE])
    lessons = {lesson.knob: lesson for lesson in merge(kda, here)}
    assert lessons["tile_v"].outcome == "helps"
    assert lessons["tile_v"].similarity == 1.0
    assert lessons["parallel"].outcome == "hurts"
    assert lessons["flags"].outcome == "hurts" and lessons["flags"].effect is None
    assert lessons["tile_v"].candidates and lessons["tile_v"].runs == ("r1",)
    assert "tile_v: 32 -> 64: helps" in lessons["tile_v"].text()

    # GDN at a decode shape on another thread count: same family, further away
    gdn = LessonContext.of("gdn", {**HOST, "threads": 32}, ["B64 T1 H16 K128 V128 +h0"])
    far = {lesson.knob: lesson for lesson in merge(kda, gdn)}
    assert far["tile_v"].similarity == pytest.approx(0.8 * 0.6 * 0.3)
    near, distant = lessons["tile_v"].effect, far["tile_v"].effect
    assert near is not None and distant is not None
    assert distant.high - distant.low > near.high - near.low  # counts for less
    # a contradicting run elsewhere barely moves the exact context's lesson
    other = [row for row in extract("r2", "kda", {**HOST, "threads": 1}, _run(space))
             if row.knob == "tile_v"]
    other[0].log_ratio, other[0].shape_class = math.log(1.3), "decode"
    merged = {lesson.knob: lesson for lesson in merge([*kda, *other], here)}["tile_v"]
    assert merged.effect is not None and merged.effect.median < 0.9
    assert merged.runs == ("r1", "r2")
    assert merge(kda, LessonContext.of("matmul", HOST, [SHAPE])) == []  # other family


def test_finished_runs_leave_lessons_in_the_store(tmp_path: Path, space: DesignSpace) -> None:
    store = Store(tmp_path / "x.db")
    run = store.start_run("kda", {"workload": "kda"}, HOST)
    for candidate, verdict, crowned in _run(space):
        store.record(run, candidate, verdict)
        if crowned:
            store.set_champion(run, candidate.id)
    assert store.lesson_evidence() == []
    store.finish_run(run, "finished", None)
    store.finish_run(run, "finished", None)  # again (a resumed run): replaced, not doubled
    assert len(store.lesson_evidence("delta-rule")) == 3
    assert store.lesson_evidence("other-family") == []
    lessons = store.lessons_for(LessonContext.of("gdn", HOST, [SHAPE]))
    assert lessons[0].knob == "tile_v"  # the helpful one first

    result = CliRunner().invoke(app, ["lessons", "--workload", "gdn", "--json", "--db",
                                      str(tmp_path / "x.db")])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert {entry["knob"] for entry in listed} == {"tile_v", "flags", "parallel"}
    tile = next(entry for entry in listed if entry["knob"] == "tile_v")
    assert tile["outcome"] == "helps" and tile["runs"] == [run]
    assert tile["context"] == "kda | cpu-x86_64-avx512-t2_4 | prefill-s"
    table = CliRunner().invoke(app, ["lessons", "--db", str(tmp_path / "x.db")])
    assert "tile_v: 32 -> 64" in table.output and "helps" in table.output
    assert "champions: the settings" in table.output and run in table.output


def _lesson(knob: str, before: object, after: object, ratio: float | None,
            failures: int = 0) -> Lesson:
    effect = None if ratio is None else Estimate(ratio, ratio * 0.95, ratio * 1.05)
    return Lesson(knob, before, after, effect, pairs=0 if ratio is None else 3,  # type: ignore[arg-type]
                  failures=failures, similarity=1.0)


def test_the_local_search_agent_uses_lessons_as_priors(space: DesignSpace) -> None:
    goal = default_goal("kda").with_overrides(threads=1)
    tiling = LocalSearchAgent("builtin-tiling", "tiling", (space.knob("tile_v"),))
    start = _make(space)
    lessons = (_lesson("tile_v", 32, 16, 1.4), _lesson("tile_v", 32, 64, 0.7))

    def first_moves(with_lessons: tuple[Lesson, ...], seed: int) -> list[object]:
        evaluated, moves = {start.id}, []
        for _ in range(4):
            context = Context(goal, space, start, frozenset(evaluated), lessons=with_lessons,
                              rng=random.Random(seed))
            [proposal] = tiling.propose(context)
            evaluated.add(proposal.id)
            moves.append(proposal.knobs["tile_v"])
        return moves

    for seed in range(6):  # whatever the shuffle: helpful first, harmful after the others
        moves = first_moves(lessons, seed)
        assert moves[0] == 64
        assert moves.index(16) == 3  # after 64 and the joint moves to 8 and 128
    assert {first_moves((), seed)[0] for seed in range(12)} == {16, 64}  # no lessons: random


def test_an_agent_passes_its_turn_to_another_domains_helpful_move(space: DesignSpace) -> None:
    goal = default_goal("kda").with_overrides(threads=1)
    agents = {knob.domain: LocalSearchAgent(f"builtin-{knob.domain}", knob.domain, (knob,))
              for knob in space.knobs}
    start = _make(space)
    separate = _make(space, start, passes="separate")
    lessons = (_lesson("passes", "fused", "separate", 0.9), _lesson("tile_v", 32, 8, 3.0))

    def ask(domain: str, evaluated: set[str]) -> list[Candidate]:
        return agents[domain].propose(Context(goal, space, start, frozenset(evaluated),
                                              lessons=lessons, rng=random.Random(0)))

    assert ask("tiling", set())[0].id == start.id  # the start comes first regardless
    assert ask("tiling", {start.id}) == []  # passes: fused -> separate is untried and helps
    assert ask("algorithm", {start.id})[0].id == separate.id
    assert ask("tiling", {start.id, separate.id})  # tried: everyone proposes again
