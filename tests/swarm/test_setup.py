"""A run's setup and budget: estimated before it starts, reused across runs, logged, and
the whole command within its budget plus the stated grace."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from swarmfab.agents.builtin import RestartAgent, domain_agents
from swarmfab.errors import DeadlineError, GoalError
from swarmfab.evaluation import Evaluator, SideBySide
from swarmfab.goal import Goal
from swarmfab.knowledge import Store
from swarmfab.records import Estimate
from swarmfab.sandbox import Limits
from swarmfab.swarm import Run
from swarmfab.swarm.budget import SETUP_SHARE, Budget
from swarmfab.swarm.setup import DEVICE_BASELINES_S, Setup, _own_ticks, busy_cores
from swarmfab.workloads import design_space, get_workload

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
SMALL = [{"B": 1, "T": 64, "H": 2, "K": 16, "V": 16},
         {"B": 2, "T": 1, "H": 2, "K": 16, "V": 16, "initial_state": True}]
RMSNORM = Path(__file__).parents[2] / "examples" / "workloads" / "rmsnorm.py"


def _goal(**fields: object) -> Goal:
    return Goal.model_validate({"workload": "kda", "budget": "60s", "threads": 1, "seed": 1,
                                "shapes": SMALL, **fields})


def _evaluator(goal: Goal, tmp_path: Path) -> Evaluator:
    workload = get_workload(goal.workload)
    return Evaluator(workload, goal.target_shapes(), tmp_path / "cache", threads=1,
                     tolerances=workload.tolerances(torch.float32), limits=Limits(wall_s=60),
                     seed=goal.seed)


def _setup(goal: Goal, store: Store, tmp_path: Path, lines: list[str]) -> Setup:
    return Setup(goal, store, _evaluator(goal, tmp_path), lines.append, lambda phase: None)


def test_the_setup_is_estimated_from_probe_shapes_and_each_step_is_logged(
        tmp_path: Path) -> None:
    lines: list[str] = []
    setup = _setup(_goal(), Store(tmp_path / "x.db"), tmp_path, lines)
    estimate = setup.check(Budget(time.monotonic(), 60.0))  # not refused (a GoalError)
    assert estimate is not None and estimate.setup_s > 0 and math.isfinite(estimate.setup_s)
    assert set(estimate.references_s) == {"B1 T64 H2 K16 V16", "B2 T1 H2 K16 V16 +h0"}
    calibration = setup.run()
    assert calibration.fastest.keys() == estimate.references_s.keys()
    assert any(line.startswith("setup estimate: about") for line in lines)
    assert "computing references 1/2: B1 T64 H2 K16 V16" in lines
    assert "computing references 2/2: B2 T1 H2 K16 V16 +h0" in lines
    assert any(line.startswith("baselines on B1 T64 H2 K16 V16 (estimated)") for line in lines)


def test_a_budget_the_setup_would_not_fit_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a peaks file of its own: the session's may be written by another worker between
    # the estimate below and the check's, which would then leave out measuring the peaks
    monkeypatch.setenv("SWARMFAB_HOST_PEAKS", str(tmp_path / "host-peaks.json"))
    goal = _goal(shapes=[{"B": 1, "T": 2048, "H": 4, "K": 64, "V": 64}])
    setup = _setup(goal, Store(tmp_path / "x.db"), tmp_path, [])
    estimate = setup.estimate or setup._estimate()
    assert estimate is not None
    tiny = estimate.setup_s / SETUP_SHARE / 4  # a quarter of what the setup needs
    started = time.monotonic()
    with pytest.raises(GoalError) as refused:
        setup.check(Budget(started, tiny))
    assert time.monotonic() - started < 30  # at once: nothing but the probe was run
    message = str(refused.value)
    assert "the setup alone would take about" in message and "B1 T2048 H4 K64 V64" in message
    assert "--budget" in message and "fewer or smaller shapes" in message


def test_on_a_device_the_baselines_jobs_are_part_of_the_estimate(tmp_path: Path) -> None:
    """A device's baselines are timed in jobs that start CUDA and fla (nothing is probed
    in this process): a budget they would not fit is refused at once, naming them."""
    goal = _goal(device="cuda", budget="60s")
    setup = _setup(goal, Store(tmp_path / "x.db"), tmp_path, [])
    estimate = setup._estimate()
    assert estimate is not None
    assert estimate.baselines_s == dict.fromkeys(estimate.references_s, DEVICE_BASELINES_S)
    assert estimate.setup_s == pytest.approx(sum(estimate.references_s.values())
                                             + estimate.peaks_s + 2 * DEVICE_BASELINES_S)
    with pytest.raises(GoalError, match=r"baselines 30 s.*Give --budget \d+s"):
        setup.check(Budget(time.monotonic(), 60.0))
    on_cpu = _setup(_goal(), Store(tmp_path / "y.db"), tmp_path, [])._estimate()
    assert on_cpu is not None and on_cpu.baselines_s == {}


def test_timing_the_baselines_stops_at_the_budgets_end_with_the_reason(tmp_path: Path) -> None:
    """On a device no estimate is made (fla autotunes at its first call): the setup's
    baseline timings stop at the budget's end instead of running past it. (The shape is
    long enough that no host times its baselines within the half second.)"""
    goal = _goal(shapes=[{"B": 1, "T": 8192, "H": 4, "K": 64, "V": 64}])
    setup = _setup(goal, Store(tmp_path / "x.db"), tmp_path, [])
    setup.evaluator.prepare()  # the references: computed before the budget's end
    started = time.monotonic()
    with pytest.raises(DeadlineError) as stopped:
        setup._calibrate(deadline=started + 0.5)
    assert time.monotonic() - started < 0.5 + 10  # the jobs' own ending, not their limit
    message = str(stopped.value)
    assert message.startswith("the setup did not fit the budget: timing B1 T8192 H4 K64 V64 "
                              "was stopped at the deadline")
    assert "give a larger budget" in message
    with pytest.raises(DeadlineError, match="no time was left to time B1 T8192"):
        setup._calibrate(deadline=time.monotonic())


def test_other_processes_keeping_cores_busy_are_seen() -> None:
    """The load warning's reading: a spinning process outside this one's tree (started
    through a shell that exits, so init adopts it) shows up as about one busy core."""
    quiet = busy_cores()
    shell = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True)
    spinner = int(shell.stdout)
    try:
        time.sleep(0.3)
        busy = busy_cores(0.5)
    finally:
        os.kill(spinner, signal.SIGKILL)
    assert busy >= min(0.7, quiet + 0.5), (quiet, busy)


@pytest.mark.exclusive  # the spinners must get most of both cores: no other test running
def test_this_process_tree_is_not_other_load() -> None:
    """What this process and its descendants spend (a run's forkserver importing torch
    as the run starts) is not other processes' load: with two grandchildren spinning,
    every core of a 2-core host is busy, and busy_cores still reads the others' share."""
    spin = f"'{sys.executable}' -c 'while True: pass'"
    spinners = subprocess.Popen(["sh", "-c", f"{spin} & {spin}; wait"], start_new_session=True)
    try:
        time.sleep(0.3)
        before, start = _own_ticks(), time.monotonic()
        others = busy_cores(0.5)
        spent = (_own_ticks() - before) / os.sysconf("SC_CLK_TCK")
        elapsed = time.monotonic() - start
    finally:
        os.killpg(spinners.pid, signal.SIGKILL)  # the shell and its two spinners
        spinners.wait()
    assert spent >= 0.5 * elapsed, (spent, elapsed)
    assert others <= (os.cpu_count() or 1) - 0.5, others  # all of them, counted as others


def test_baseline_timings_measured_side_by_side_are_reused_by_the_next_run(
        tmp_path: Path) -> None:
    """A workload without a probe shape times its baselines in jobs once per host."""
    goal = Goal.model_validate({"workload": str(RMSNORM), "budget": "60s", "threads": 1})
    store = Store(tmp_path / "x.db")
    first: list[str] = []
    setup = _setup(goal, store, tmp_path, first)
    assert setup.check(Budget(time.monotonic(), 60.0)) is None  # no probe: no estimate
    timed = setup.run()
    assert any(line.startswith("timing baselines 1/") for line in first)
    again: list[str] = []
    second = _setup(goal, store, tmp_path, again)
    second.evaluator.side_by_side = None  # type: ignore[assignment,method-assign]
    recalled = second.run()  # would fail if it timed anything
    assert recalled.seconds == timed.seconds and recalled.fastest == timed.fastest
    assert not any(line.startswith("timing baselines") for line in again)
    assert all("(stored, measured)" in line for line in again if line.startswith("baselines on"))
    other_threads = Goal.model_validate({**goal.model_dump(by_alias=True), "threads": 2})
    assert all(not known for known in _setup(other_threads, store, tmp_path, []).cached.values())


def test_probe_estimates_are_kept_and_a_measurement_replaces_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "x.db")
    first = _setup(_goal(), store, tmp_path, [])
    first.check(Budget(time.monotonic(), 60.0))
    second = _setup(_goal(), store, tmp_path, [])
    assert all(source == "estimated" for known in second.cached.values()
               for _, source in known.values())
    assert all(set(known) == set(second.names) for known in second.cached.values())
    calibration = second.run()  # from the store: no probe needed for the baselines
    label = next(iter(calibration.seconds))
    table = SideBySide(label, "champion", {"torch-recurrent": Estimate(0.5, 0.4, 0.6)}, {}, 3)
    second.remember([table])
    third = _setup(_goal(), store, tmp_path, [])
    assert third.cached[label]["torch-recurrent"] == (0.5, "measured")
    third._save(label, "torch-recurrent", 9.0, "estimated")  # never over a measurement
    assert _setup(_goal(), store, tmp_path, []).cached[label]["torch-recurrent"][0] == 0.5


@needs_gcc
@pytest.mark.slow
def test_a_run_ends_within_its_budget_counted_from_the_command_start(tmp_path: Path) -> None:
    """The command's first seconds (imports, the store) count; the closing table is
    sized to what is left; the run ends by the budget plus the stated grace."""
    goal = _goal(budget="30s", workers=1)
    store = Store(tmp_path / "x.db")
    space = design_space("kda")
    started = time.monotonic() - 4.0  # as if the command had started 4 s ago
    lines: list[str] = []
    run = Run(goal, store, _evaluator(goal, tmp_path), space, domain_agents(space.knobs),
              tmp_path, log=lines.append, fallback=RestartAgent(), started=started)
    result = run.execute()
    ended = time.monotonic() - started
    assert result.status == "finished"
    assert ended <= goal.budget_s + run.budget.grace_s, lines
    assert any("budget 30 s (+15 s grace), setup included" in line for line in lines)
    search_s = _search_window(lines)
    if search_s >= 15:  # room for an evaluation (a few seconds each on a quiet host)
        assert result.evaluations >= 1, lines
    elif search_s > 1:  # a busy host: one started, and was judged or cancelled in time
        assert result.evaluations >= 1 or any("in flight cancelled" in line
                                              for line in lines), lines
    if result.champion is not None:  # the closing table's medians serve the next run
        again = _setup(goal, store, tmp_path, [])
        assert any(source == "measured" for known in again.cached.values()
                   for _, source in known.values())


def _search_window(lines: list[str]) -> float:
    """Seconds from the setup's end to the last moment an evaluation may start, from the
    run's first log line "<elapsed>s ... no evaluation starts after <N> s" (a champion
    may move that moment later: the closing table's time is kept from then on)."""
    found = [match for line in lines
             if (match := re.match(r"\s*([\d.]+)s .*no evaluation starts after (\d+) s", line))]
    assert found, lines
    return float(found[0][2]) - float(found[0][1])


def test_a_device_goal_probes_only_the_reference_on_the_cpu(tmp_path: Path) -> None:
    """Device baselines take device tensors: they are left to the sandboxed jobs."""
    goal = _goal(device="cuda")
    setup = _setup(goal, Store(tmp_path / "x.db"), tmp_path, [])
    estimate = setup._estimate()
    assert estimate is not None
    assert all(calls == {} for calls in estimate.calls.values())
    assert all(seconds > 0 for seconds in estimate.references_s.values())
