"""The engine factory: goals, recipes, verification, the objective, a short run, export."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.engine.engine import BIG_MODEL_BYTES, EngineConfig, LLMEngine
from swarmfab.engine.model import HybridModel
from swarmfab.engine.request import SamplingParams
from swarmfab.engine.weights import parameter_count
from swarmfab.errors import EngineError, GoalError, SwarmfabError
from swarmfab.knowledge import Store
from swarmfab.knowledge.lessons import shape_class
from swarmfab.records import Candidate, CheckResult, Status, Verdict
from swarmfab.report.export import export_champion
from swarmfab.report.html import write_report
from swarmfab.report.run_view import load_run_view
from swarmfab.report.serving_view import ServingPoint, pareto_front
from swarmfab.serving.engines import get_engine
from swarmfab.serving.evaluate import (
    Comparison,
    EngineProcess,
    EngineStartError,
    LoadRound,
    comparison_verdict,
    greedy_tokens,
    verify_prompts,
    verify_tokens,
)
from swarmfab.serving.factory import (
    _Budget,
    _Search,
    _vocab,
    auto_threads,
    run_engine_goal,
    same_under_traffic,
)
from swarmfab.serving.goal import EngineGoal, load_engine_goal, validate_engine_goal
from swarmfab.serving.numerics import Scores, numerics_checks, score_continuations
from swarmfab.serving.recipe import Recipe, engine_space, kda_champions, read_recipe
from swarmfab.swarm.gate import judge
from swarmfab.swarm.hosts import host_record
from swarmfab.workloads import design_space

GOAL = {"kind": "engine", "model": "random:tiny", "objective": {"p99_tpot_ms": 100}}


def _goal(**changes: object) -> EngineGoal:
    return validate_engine_goal({**GOAL, **changes}, "test")


def test_engine_goals_are_validated_field_by_field(tmp_path: Path) -> None:
    goal = _goal(budget="90s", traffic={"concurrency": 4, "input_len": 16})
    assert goal.budget_s == 90 and goal.traffic.label() == "c4 in16 out32"
    assert goal.objective.slos() == {"tpot": 100}
    with pytest.raises(GoalError, match="objective"):
        validate_engine_goal({**GOAL, "objective": {}}, "test")
    with pytest.raises(GoalError, match=r"random:small.*random:tiny"):
        _goal(model="random:huge")
    with pytest.raises(GoalError, match=r"traffic\.concurency: unknown key"):
        _goal(traffic={"concurency": 4})
    with pytest.raises(GoalError, match="request_rate"):
        _goal(traffic={"concurrency": None})
    assert _goal(traffic={"range_ratio": 0.5}).traffic.label() == "c8 in32 out32 r0.5"
    with pytest.raises(GoalError, match="range_ratio"):
        _goal(traffic={"range_ratio": 1.0})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hi", "output_len": 4}\n')
    (tmp_path / "bad.jsonl").write_text('{"text": 1}\n')
    with pytest.raises(GoalError, match=r"traffic.*entry 0: expected"):
        _goal(traffic={"prompts_file": str(tmp_path / "bad.jsonl")})
    with pytest.raises(GoalError, match="offered_loads"):
        _goal(offered_loads=[4, 0])
    open_loop = _goal(traffic={"request_rate": 2.0}).at_load(5)  # a rate, not a concurrency
    assert open_loop.traffic.request_rate == 5 and open_loop.traffic.concurrency == 8
    file = tmp_path / "goal.toml"
    file.write_text('kind = "engine"\nmodel = "ckpt"\n[objective]\np99_ttft_ms = 5\n'
                    '[traffic]\nprompts_file = "prompts.jsonl"\n')
    goal = load_engine_goal(file)
    assert goal.model == str(tmp_path / "ckpt")          # relative to the goal file
    assert goal.traffic.dataset() == (("hi", 4),)        # so is the prompts file
    prompts.write_text("not json")      # read with the goal: every run sends the same
    assert goal.at_load(2).traffic.dataset() == (("hi", 4),)
    assert goal.traffic.label() == "c8 prompts:prompts.jsonl"
    assert shape_class(goal.run_label(153_000_000)) == "engine-s-c8"
    with pytest.raises(GoalError, match=r"no config\.json"):
        goal.model_dir(tmp_path / "cache")


def test_a_recipe_is_its_settings_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    space = engine_space(2)
    candidate = space.instantiate({**space.default(), "threads": 1}, threads=2)
    recipe = read_recipe(_write(tmp_path, candidate.sources[candidate.entry]))
    config = recipe.engine_config()
    assert (config.max_num_seqs, config.threads, config.kv_cache_bytes) == (32, 1, 64 << 20)
    assert candidate.id != space.instantiate(space.default(), threads=2).id
    def dtypes(flags: set[str]) -> tuple[object, ...]:
        return next(k.values for k in engine_space(2, frozenset(flags)).knobs
                    if k.name == "dtype")
    assert dtypes({"avx2", "fma"}) == ("float32",)  # bfloat16 only where the CPU has it
    assert dtypes({"avx512f", "amx_bf16"}) == ("float32", "bfloat16")
    assert Recipe({"dtype": "bfloat16"}).engine_config().dtype == "bfloat16"
    with pytest.raises(EngineError, match="dtype must be one of float32, bfloat16"):
        Recipe({"dtype": "float16"}).engine_config()
    chosen = Recipe({"moe_experts": "dense", "mla_decode": "expanded",
                     "step_mix": "prefill-first"})
    assert chosen.engine_config().step_mix == "prefill-first"
    labels = chosen.kernel_slots(tmp_path).labels
    assert (labels["moe_experts"], labels["mla_decode"]) == ("torch-dense", "torch-expanded")
    with pytest.raises(EngineError, match="moe_experts must be one of auto, dense, loop"):
        Recipe({"moe_experts": "sparse"}).kernel_slots(tmp_path)
    with pytest.raises(EngineError, match="step_mix must be one of"):
        Recipe({"step_mix": "decode-only"}).engine_config()
    with pytest.raises(EngineError, match="unknown knob"):
        read_recipe(_write(tmp_path, json.dumps({"format": 1, "settings": {"chunk": 3}})))
    with pytest.raises(EngineError, match="format-1"):
        read_recipe(_write(tmp_path, "[]"))
    with pytest.raises(EngineError, match="no recipe"):
        read_recipe(tmp_path / "missing")


def _write(directory: Path, text: str) -> Path:
    (directory / "recipe.json").write_text(text)
    return directory


def test_a_candidate_whose_tokens_differ_fails_its_checks() -> None:
    checks = verify_tokens([[5, 6, 7], [1, 2]], [[5, 6, 7], [1, 3]])
    assert [c.passed for c in checks] == [True, False]
    assert "token 1 differs" in checks[1].detail
    assert not verify_tokens([[1, 2]], [[1]])[0].passed      # a shorter answer fails too


def _round(metric: float, tpot: float) -> LoadRound:
    return LoadRound(metric, 100.0, tpot, 10 * metric, metric, 0)


def test_the_kernel_factory_s_champion_fills_a_kda_slot(tiny_model: Path,
                                                       tmp_path: Path) -> None:
    """A KDA run's champion on this host becomes a "champion" choice of the KDA slots; its
    setting travels in the recipe, which builds that kernel wherever it is served."""
    store = Store(tmp_path / "runs.db")
    assert kda_champions(store, host_record(2, "c")) == {}  # nothing yet: no such choice
    assert "champion" not in next(k.values for k in engine_space(2, frozenset()).knobs
                                  if k.name == "kda_decode")
    kda = design_space("kda")
    setting = {**kda.default(), "algorithm": "recurrent", "tile_v": 16, "unroll": 2}
    champion = kda.instantiate(setting, threads=2, agent="builtin-tiling")
    run_id = store.start_run("kda", {}, host_record(2, "c"))
    store.record(run_id, champion, Verdict(champion.id, Status.ACCEPTED, "faster"))
    store.set_champion(run_id, champion.id)
    store.finish_run(run_id, "finished", {})

    found = kda_champions(store, host_record(2, "c"))
    assert found["decode"] == setting
    space = engine_space(2, frozenset(), kda=found)
    candidate = space.instantiate({**space.default(), "kda_decode": "champion"}, threads=2)
    recipe = read_recipe(_write(tmp_path, candidate.sources[candidate.entry]))
    assert recipe.kernels == {"decode": setting}
    slots = recipe.kernel_slots(tmp_path / "kernels")
    assert slots.labels["kda_decode"] == "c:champion"
    prompts = [[5, 9, 33], [7] * 20, list(range(3, 40))]
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    assert LLMEngine.from_pretrained(tiny_model, slots=slots).generate(prompts, params) == \
        LLMEngine.from_pretrained(tiny_model).generate(prompts, params)
    with pytest.raises(EngineError, match=r"holds no kernels\.prefill setting"):
        Recipe({"kda_prefill": "champion"}).kernel_slots(tmp_path / "kernels")


def test_the_prefill_slot_offers_both_c_forms_and_their_tokens_are_the_engine_s(
        tiny_model: Path, tmp_path: Path) -> None:
    """``c`` is the chunked form in prefill, ``c-recurrent`` the recurrence; the engine
    serves the reference engine's greedy tokens with either (prompts that span several
    prefill chunks carry a state from one chunk to the next)."""
    prefill = next(k.values for k in engine_space(2, frozenset()).knobs
                   if k.name == "kda_prefill")
    decode = next(k.values for k in engine_space(2, frozenset()).knobs
                  if k.name == "kda_decode")
    assert prefill == ("torch", "c", "c-recurrent") and decode == ("torch", "c")
    prompts = [[5, 9, 33], [7] * 20, list(range(3, 40))]
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    config = EngineConfig(max_num_batched_tokens=16)  # the long prompts in chunks
    expected = LLMEngine.from_pretrained(tiny_model, config).generate(prompts, params)
    for choice, label in (("c", "c:chunked"), ("c-recurrent", "c:recurrent")):
        slots = Recipe({"kda_prefill": choice, "kda_decode": "c"}).kernel_slots(
            tmp_path / "kernels")
        assert (slots.labels["kda_prefill"], slots.labels["kda_decode"]) == (
            label, "c:recurrent")
        assert LLMEngine.from_pretrained(tiny_model, config, slots).generate(
            prompts, params) == expected, choice
    with pytest.raises(EngineError, match="kda_decode must be 'torch', 'c' or 'champion'"):
        Recipe({"kda_decode": "c-recurrent"}).kernel_slots(tmp_path / "kernels")


@pytest.mark.slow  # engines started and judged: several seconds
def test_a_recipe_that_changes_numerics_is_judged_teacher_forced(tiny_model: Path,
                                                                 tmp_path: Path) -> None:
    """bfloat16 is scored on the reference's own continuation: its top-1 agreement and
    log-probability error against the limits, not its free-running tokens."""
    continuations = [[4, 5, 6], [7, 8]]
    reference = [Scores((4, 5, 6), (-1.0, -2.0, -0.5)), Scores((7, 8), (-0.2, -0.3))]
    close = [Scores((4, 5, 9), (-1.01, -2.0, -0.6)), Scores((7, 8), (-0.2, -0.31))]
    checks = numerics_checks(continuations, reference, close, 0.8, 0.2)
    assert checks[-1].passed and "top-1 agreement 0.800" in checks[-1].detail
    assert [c.passed for c in checks[:-1]] == [False, True]  # 2/3 agree on prompt 0
    assert not numerics_checks(continuations, reference, close, 0.9, 0.2)[-1].passed
    assert not numerics_checks(continuations, reference, close, 0.8, 0.05)[-1].passed

    prompts = [[5, 9, 33, 40], [7] * 12, [100, 3, 12, 77, 8, 9, 10, 11, 12, 13]]
    recipes = {}
    for dtype in ("float32", "bfloat16"):
        (tmp_path / dtype).mkdir()
        recipes[dtype] = _write(tmp_path / dtype, Recipe({"dtype": dtype}).to_json())
    with EngineProcess(tiny_model, recipes["float32"], tmp_path / "a.log").start(120) as ref, \
            EngineProcess(tiny_model, recipes["bfloat16"], tmp_path / "b.log").start(120) as bf:
        tokens = greedy_tokens(ref.url, prompts, 12)
        own = score_continuations(ref.url, prompts, tokens)
        again = score_continuations(ref.url, prompts, tokens)
        # the same scores, up to float32 rounding: the three requests may share a step
        # or not, and a batch of another shape rounds its sums differently
        assert [s.best for s in again] == [s.best for s in own]
        assert all(abs(a - b) < 1e-4 for s, t in zip(again, own, strict=True)
                   for a, b in zip(s.logprob, t.logprob, strict=True))
        assert [list(s.best) for s in own] == tokens  # greedy: the likeliest, teacher-forced
        exact = numerics_checks(tokens, own, own, 1.0, 1e-9)[-1]
        assert exact.passed and "largest log-probability error 0 nats" in exact.detail
        bf16 = score_continuations(bf.url, prompts, tokens)
        errors = [abs(a - b) for s, t in zip(bf16, own, strict=True)
                  for a, b in zip(s.logprob, t.logprob, strict=True)]
        assert 0 < max(errors) < 0.1  # bfloat16 moves every score a little
        assert not numerics_checks(tokens, own, bf16, 1.0, 1e-6)[-1].passed
        assert numerics_checks(tokens, own, bf16, 0.5, 0.5)[-1].passed


def test_a_faster_recipe_that_breaks_the_objective_is_not_crowned() -> None:
    goal = _goal()
    slow_ok = Comparison([_round(1.0, 50)] * 4, [_round(1.0, 50)] * 4)
    fast_ok = Comparison([_round(1.0, 50)] * 4, [_round(2.0, 60), _round(2.1, 60),
                                                 _round(1.9, 60), _round(2.0, 60)])
    fast_late = Comparison(fast_ok.incumbent, [_round(2.0, 150)] * 4)
    # 3% more, every round: real, perhaps, but below the 5% a crown needs
    slightly = Comparison(fast_ok.incumbent, [_round(1.03, 50), _round(1.031, 50),
                                              _round(1.029, 50), _round(1.03, 50)])
    verdicts = [comparison_verdict("c", "i", pair, [], goal, 1.0, goal.run_label(898_200))
                for pair in (slow_ok, fast_ok, fast_late, slightly)]
    assert [judge(v).promote for v in verdicts] == [False, True, False, False]
    assert verdicts[2].status is Status.REJECTED and "p99 TPOT 150.0 ms > 100 ms" in \
        verdicts[2].reason


def test_where_the_incumbent_breaks_the_objective_a_candidate_nearer_to_it_may_be_crowned(
) -> None:
    """On a host slower than the goal's, the default breaks the objective: a faster
    candidate is crowned when it breaks no limit the incumbent meets and none by more."""
    goal = _goal(objective={"p99_tpot_ms": 100, "p99_ttft_ms": 500})
    late = [LoadRound(1.0, 400.0, 150.0, 10.0, 1.0, 0)] * 4

    def against_late(ttft: float, tpot: float) -> Verdict:
        faster = [LoadRound(m, ttft, tpot, 10 * m, m, 0) for m in (2.0, 2.1, 1.9, 2.0)]
        return comparison_verdict("c", "i", Comparison(late, faster), [], goal, 1.0, "x")

    nearer, further, new_break = (against_late(400.0, 120.0), against_late(400.0, 160.0),
                                  against_late(600.0, 120.0))
    assert judge(nearer).promote and "neither meets the objective" in nearer.reason
    assert "p99 TPOT 120.0 ms > 100 ms" in nearer.checks[-1].detail  # still said
    assert not judge(further).promote and further.status is Status.REJECTED
    assert not judge(new_break).promote and "p99 TTFT 600.0 ms > 500 ms" in new_break.reason


def test_without_time_for_a_closing_the_crown_over_the_default_is_the_gain(
        tmp_path: Path) -> None:
    goal = _goal()
    store = Store(tmp_path / "runs.db")
    run_id = store.start_run("engine", goal.model_dump(mode="json", by_alias=True),
                             host_record(goal.threads, "c"))
    space = engine_space(goal.threads)
    default = space.instantiate(space.default(), threads=goal.threads, agent="default")
    champion = space.instantiate({**space.default(), "block_size": 8}, threads=goal.threads)
    lines: list[str] = []
    search = _Search(goal, get_engine("swarmfab"), store, run_id, tmp_path / "no-model",
                     tmp_path, _Budget(
        0.0, time.monotonic()), lines.append, "label")
    search.incumbent = EngineProcess(tmp_path, tmp_path / "recipe.json", tmp_path / "log")
    search.closing_s = 60.0   # more than the budget has left: no new processes start
    search.crowned_over_default = Comparison([_round(1.0, 50)] * 4, [_round(1.6, 50)] * 4)
    result = search._closing(default, champion)
    assert result.gain is not None and math.isclose(result.gain.median, 1.6)
    assert (result.default_metric, result.champion_metric) == (1.0, 1.6)
    assert any("crowning comparison" in line for line in lines), lines
    ((_, detail),) = store.events(run_id, "closing")
    assert json.loads(detail)["source"] == "crowning"


def test_a_move_that_cannot_change_the_traffic_s_batches_is_not_measured() -> None:
    """max_num_seqs at or above the requests in flight runs the same batches: measuring
    it could only crown noise (a 10-minute run once crowned 16 over 32 at concurrency 8)."""
    base = engine_space(2).default()
    closed = _goal(traffic={"concurrency": 8})
    assert same_under_traffic({**base, "max_num_seqs": 16}, base, closed)
    assert same_under_traffic({**base, "max_num_seqs": 8}, base, closed)
    assert not same_under_traffic({**base, "max_num_seqs": 4}, base, closed)
    assert not same_under_traffic({**base, "max_num_seqs": 16, "block_size": 32}, base,
                                  closed)
    assert not same_under_traffic({**base, "max_num_seqs": 64},  # open loop, no cap
                                  base, _goal(traffic={"concurrency": None,
                                                       "request_rate": 4.0}))
    # threads = "auto" is the count the engine would choose for that dtype
    resolved = {"float32": 2, "bfloat16": 1}
    assert same_under_traffic({**base, "threads": 2}, base, closed, resolved)
    assert not same_under_traffic({**base, "threads": 1}, base, closed, resolved)
    assert not same_under_traffic({**base, "threads": 2}, base, closed)  # unknown: measure
    assert not same_under_traffic({**base, "dtype": "bfloat16", "threads": 2},
                                  {**base, "dtype": "bfloat16"}, closed, resolved)


def test_a_checkpoint_s_parameters_are_counted_from_its_headers(tiny_model: Path,
                                                                tmp_path: Path) -> None:
    tensors = load_file(str(tiny_model / "model.safetensors"))
    count = parameter_count(tiny_model)
    assert count == sum(t.numel() for t in tensors.values())
    goal = _goal()
    assert goal.run_label(count) == f"{count / 1e3:.3g}K {goal.traffic.label()}"
    assert goal.run_label(153_222_148) == f"153M {goal.traffic.label()}"
    (tmp_path / "model.safetensors").write_bytes(b"not a header")
    with pytest.raises(EngineError, match="cannot read the weights"):
        parameter_count(tmp_path)


def test_auto_threads_follow_the_checkpoint_s_size(tiny_model: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    model = HybridModel.from_pretrained(tiny_model)
    assert model.weight_bytes < BIG_MODEL_BYTES  # a small model leaves one CPU free
    assert auto_threads(tiny_model) == {"float32": max(1, cpus - 1),
                                        "bfloat16": max(1, cpus - 1)}


def test_the_pareto_front_keeps_only_undominated_settings() -> None:
    def point(throughput: float, tpot: float) -> ServingPoint:
        return ServingPoint("c", "candidate", "", 1.0, throughput, 10.0, tpot, 2, True)

    points = [point(100, 10), point(120, 12), point(90, 11), point(120, 15), point(80, 5),
              point(100, 10)]
    # (90, 11) is beaten by (100, 10); (120, 15) by (120, 12); equal points both stay
    assert pareto_front(points) == {0, 1, 4, 5}


def test_a_recipe_that_cannot_start_is_reported_with_its_log(tiny_model: Path,
                                                              tmp_path: Path) -> None:
    recipe = _write(tmp_path, Recipe({"threads": 0}).to_json()) / "recipe.json"
    process = EngineProcess(tiny_model, recipe, tmp_path / "engine.log")
    with pytest.raises(EngineStartError) as failure:
        process.start(120)
    assert not failure.value.timed_out and "threads must be at least 1" in failure.value.log
    assert not process.alive()


@pytest.mark.slow  # a whole run
def test_a_short_engine_run_records_verdicts_and_its_recipe_serves(
    tiny_model: Path, tmp_path: Path
) -> None:
    goal = _goal(model=str(tiny_model), budget="150s", max_evaluations=2, min_rounds=2,
                 max_rounds=2, verify_prompts=3, verify_tokens=6, offered_loads=[1, 8],
                 traffic={"input_len": 8, "output_len": 8, "num_prompts": 8,
                          "concurrency": 4})
    assert goal.at_load(8).traffic.concurrency == 8
    store = Store(tmp_path / "runs.db")
    earlier = _earlier_engine_run(store, goal, {"max_num_batched_tokens": 64})
    lines: list[str] = []
    result = run_engine_goal(goal, store, tmp_path / "work", lines.append)
    run = store.run(result.run_id)
    assert run.status == "finished" and run.workload == "engine"
    verdicts = store.verdicts(result.run_id)
    assert len(verdicts) == 1 + result.evaluations and result.evaluations == 2
    default = store.candidate(result.default_id)
    assert "1 champion recipe(s) recalled" in lines[1], lines
    assert default.agent == "default" and lines[2].startswith("default: goodput")
    # the earlier run's champion is tried first, then the domain agents search
    # (the same recipe as the earlier champion: the same candidate, stored once)
    assert verdicts[1][0].candidate_id == store.run(earlier).champion_id
    assert any(line.startswith("[1] recall: max_num_batched_tokens=64 -> ") for line in lines)
    # then the space's starting point: the kernel factory's KDA kernels in both slots
    second = store.candidate(verdicts[2][0].candidate_id)
    assert second.agent == "builtin-starting", lines
    assert (second.knobs["kda_prefill"], second.knobs["kda_decode"]) == ("c-recurrent", "c")
    # every measured candidate was verified before it was timed: the reference's tokens,
    # or (another dtype) the accuracy gate
    # timed with the model's size in their label, so lessons weigh by model size
    label = goal.run_label(parameter_count(tiny_model))
    assert label.endswith(" c4 in8 out8") and shape_class(label) == "engine-xs-c8"
    for _, verdict in verdicts[1:]:
        if verdict.timings:
            assert any(c.check in ("greedy-tokens", "numerics") for c in verdict.checks)
            assert verdict.timings[0].shape == label
    if result.champion_id == result.default_id:
        with pytest.raises(SwarmfabError, match="nothing to export"):
            export_champion(store, result.run_id, tmp_path / "out")
    # the report: every measured setting with its figures, the front, no kernel sections
    view = load_run_view(store, result.run_id)
    assert view.serving is not None
    measured = [v for _, v in verdicts if v.timings]
    assert len(view.serving.points) == 1 + len(measured)
    assert view.serving.points[0].role == "default" and view.serving.front
    assert all(p.output_throughput > 0 and p.p99_tpot_ms > 0 for p in view.serving.points)
    # goodput against offered load: default and champion (one engine if the same) at each
    engines = {result.default_id, result.champion_id}
    assert set(view.serving.offered) == engines
    for points in view.serving.offered.values():
        assert [load for load, _ in points] == [1.0, 8.0]
        assert all(p.metric > 0 for _, p in points)
    page = write_report(store, result.run_id, tmp_path / "r.html").read_text()
    assert "Every measured setting" in page and "Throughput against p99 TPOT" in page
    assert "Goodput against offered load" in page
    assert "PyTorch baselines" not in page and "Roofline" not in page


def _earlier_engine_run(store: Store, goal: EngineGoal, changes: dict[str, object]) -> str:
    """A finished engine run on this host whose champion changed ``changes``."""
    space = engine_space(goal.threads)
    champion = space.instantiate({**space.default(), **changes}, threads=goal.threads,
                                 agent="builtin-scheduling")
    run_id = store.start_run("engine", goal.model_dump(mode="json", by_alias=True),
                             host_record(goal.threads, "c"))
    faster = Comparison([_round(1.0, 50)] * 4, [_round(1.5, 50)] * 4)
    label = goal.run_label(parameter_count(Path(goal.model)))
    store.record(run_id, champion, comparison_verdict(champion.id, "default", faster, [],
                                                      goal, 1.0, label))
    store.set_champion(run_id, champion.id)
    store.finish_run(run_id, "finished", {})
    return run_id


@pytest.mark.slow  # engines started and served: several seconds
def test_an_exported_recipe_serves_the_same_tokens(tiny_model: Path, tmp_path: Path) -> None:
    """A crowned engine run exported, then served with ``serve --recipe``."""
    store = Store(tmp_path / "runs.db")
    space = engine_space(2)
    default = space.instantiate(space.default(), threads=2, agent="default")
    better = space.instantiate({**space.default(), "max_num_batched_tokens": 64,
                                "step_mix": "prefill-first", "moe_experts": "loop",
                                "mla_decode": "expanded", "threads": 1},
                               threads=2, agent="builtin-scheduling")
    run_id = store.start_run("engine", {**GOAL, "traffic": {}, "metric": "goodput"},
                             {"cpu": "test"})
    check = CheckResult("prompt 0", "greedy-tokens", True, "same greedy tokens")
    for candidate in (default, better):
        store.record(run_id, candidate, Verdict(candidate.id, Status.ACCEPTED, "ok", (check,)))
    store.set_champion(run_id, better.id)
    store.record_event(run_id, "champion", f"{better.id}: max_num_batched_tokens=64")
    store.finish_run(run_id, "finished", {"gain": [1.6, 1.5, 1.7], "default_metric": 1.0,
                                          "champion_metric": 1.6, "metric": "goodput",
                                          "champion": better.id, "default": default.id})
    shown = CliRunner().invoke(app, ["show", run_id, "--db", str(tmp_path / "runs.db")])
    assert "gain: goodput 1.60x [1.50, 1.70] over the default settings (1 -> 1.6)" in \
        " ".join(shown.output.split()), shown.output
    where = export_champion(store, run_id, tmp_path / "out")
    assert json.loads((where / "recipe.json").read_text())["settings"]["threads"] == 1
    assert "x1.60 (95% CI 1.50-1.70)" in (where / "EVIDENCE.md").read_text()
    prompts = [[5, 9, 33], [7] * 20]
    with EngineProcess(tiny_model, where, tmp_path / "a.log").start(120) as served, \
            EngineProcess(tiny_model, _write(tmp_path, default.sources["recipe.json"]),
                          tmp_path / "b.log").start(120) as reference:
        assert greedy_tokens(served.url, prompts, 6) == greedy_tokens(reference.url,
                                                                      prompts, 6)


def test_an_engine_whose_exit_lags_its_failure_is_seen_to_end(tmp_path: Path) -> None:
    """A killed engine's sockets close before its exit is visible: the factory waits a
    moment before it calls a failed load a crash (else a rejection)."""
    engine = EngineProcess(tmp_path, tmp_path / "recipe.json", tmp_path / "engine.log")
    assert engine.ended_within(0.0)  # never started
    engine._process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert engine.alive() and engine.ended_within(5.0) and not engine.alive()
    engine._process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not engine.ended_within(0.1) and engine.alive()
    finally:
        engine._process.kill()
        engine._process.wait()


@pytest.mark.slow  # engines under load until they die: several seconds
def test_an_engine_that_runs_out_of_memory_or_dies_under_load_is_a_contained_verdict(
        tiny_model: Path, tmp_path: Path) -> None:
    """A pool larger than memory fails at start; an engine killed while serving (as the
    kernel's OOM killer does) fails its load rounds. Both are verdicts; the incumbent serves
    on unchanged."""
    goal = _goal(model=str(tiny_model), budget="300s", min_rounds=2, max_rounds=2,
                 verify_prompts=2, verify_tokens=4,
                 traffic={"input_len": 8, "output_len": 8, "num_prompts": 8,
                          "concurrency": 4})
    store = Store(tmp_path / "runs.db")
    run_id = store.start_run("engine", goal.model_dump(mode="json", by_alias=True),
                             host_record(goal.threads, "c"))
    space = engine_space(goal.threads)
    default = space.instantiate(space.default(), threads=goal.threads, agent="default")
    search = _Search(goal, get_engine("swarmfab"), store, run_id, tiny_model, tmp_path,
                     _Budget(
        goal.budget_s, time.monotonic()), lambda line: None, "label")
    started: list[EngineProcess] = []
    make_process = search._process

    def recorded(candidate: Candidate, log: str = "engine.log") -> EngineProcess:
        started.append(make_process(candidate, log))
        return started[-1]

    search._process = recorded  # type: ignore[method-assign]
    try:
        search.incumbent = search._process(default).start(120)
        prompts = verify_prompts(goal, _vocab(tiny_model))
        reference = greedy_tokens(search.incumbent.url, prompts, goal.verify_tokens)

        huge = Recipe({"kv_cache_mb": 1 << 30})  # a pool of a petabyte
        too_big = Candidate("engine", "recipe", {"recipe.json": huge.to_json()},
                            "recipe.json", agent="builtin-memory")
        verdict = search._evaluate(too_big, default.id, prompts, reference, 0.0).verdict
        assert verdict.status is Status.CRASHED and not judge(verdict).promote
        assert "before serving" in verdict.reason
        assert "does not fit in this host's memory" in verdict.diagnostics[0]

        verify = search._verify

        def verify_then_kill(*args: object) -> tuple[list[CheckResult], str]:
            answer = verify(*args)  # type: ignore[arg-type]
            process = started[-1]._process
            assert process is not None
            os.killpg(process.pid, signal.SIGKILL)  # between verification and load
            return answer

        search._verify = verify_then_kill  # type: ignore[method-assign]
        killed = space.instantiate({**space.default(), "block_size": 8},
                                   threads=goal.threads, agent="builtin-memory")
        outcome = search._evaluate(killed, default.id, prompts, reference, 0.0)
        assert outcome.verdict.status is Status.CRASHED and outcome.process is None
        assert outcome.verdict.reason.startswith("load failed"), outcome.verdict.reason
        assert search.incumbent.alive()
        assert greedy_tokens(search.incumbent.url, prompts, goal.verify_tokens) == reference
    finally:
        for process in started:
            process.stop()


def test_an_engine_dies_with_a_factory_killed_by_sigkill(tiny_model: Path,
                                                          tmp_path: Path) -> None:
    recipe = _write(tmp_path, Recipe({}).to_json())
    script = (
        "import sys, time\nfrom pathlib import Path\n"
        "from swarmfab.serving.evaluate import EngineProcess\n"
        f"p = EngineProcess(Path({str(tiny_model)!r}), Path({str(recipe)!r}), "
        f"Path({str(tmp_path / 'e.log')!r})).start(120)\n"
        "print(p._process.pid, flush=True)\ntime.sleep(600)\n")
    factory = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True)
    assert factory.stdout is not None
    engine_pid = int(factory.stdout.readline())
    os.kill(factory.pid, signal.SIGKILL)
    factory.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(engine_pid):
        time.sleep(0.2)
    assert not _running(engine_pid)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _verdicts(db: Path) -> tuple[int, int]:
    """(verdicts, distinct candidates) recorded so far."""
    with sqlite3.connect(db) as connection:
        try:
            total, distinct = connection.execute(
                "select count(*), count(distinct candidate_id) from verdicts").fetchone()
        except sqlite3.OperationalError:  # tables not created yet
            return 0, 0
    return int(total), int(distinct)


@pytest.mark.slow
def test_an_engine_run_killed_by_sigkill_resumes_without_repeating(
    tiny_model: Path, tmp_path: Path
) -> None:
    """kill -9 in the middle of an engine run: ``resume`` keeps every verdict, judges
    nothing twice, serves the recorded champion again and finishes the run."""
    (tmp_path / "goal.toml").write_text(
        f'kind = "engine"\nmodel = "{tiny_model}"\nbudget = "300s"\nmax_evaluations = 8\n'
        "min_rounds = 2\nmax_rounds = 2\nverify_prompts = 2\nverify_tokens = 4\n"
        "[traffic]\ninput_len = 8\noutput_len = 8\nnum_prompts = 6\nconcurrency = 3\n"
        "[objective]\np99_tpot_ms = 1000\n")
    db, work = tmp_path / "x.db", tmp_path / "work"

    def swarmfab(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "swarmfab", *args, "--db", str(db), "--workdir", str(work)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    first = swarmfab("run", "goal.toml")
    deadline = time.monotonic() + 240
    while _verdicts(db)[0] < 2:  # the default and one candidate
        assert first.poll() is None, first.stdout.read() if first.stdout else ""
        assert time.monotonic() < deadline, "the run recorded too few verdicts"
        time.sleep(0.2)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    before, _ = _verdicts(db)
    store = Store(db)
    run_id = store.runs()[0].id
    assert store.run(run_id).status == "running"  # killed: nothing could mark it
    resumed = swarmfab("resume", run_id, "--budget", "150s", "--max-evaluations", "1")
    output, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, output
    assert f"resuming engine run {run_id}" in output and "already judged" in output, output
    after, distinct = _verdicts(db)
    assert after == distinct, "a candidate was evaluated twice"
    assert after == before + 1, output
    run = store.run(run_id)
    assert run.status == "finished" and run.summary is not None
    assert run.summary["evaluations"] == 1  # this session's
