"""Several evaluations at once: disjoint cores, no candidate judged twice, rematches."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from swarmfab.agents.builtin import RestartAgent, domain_agents
from swarmfab.evaluation import CoreBroker, Evaluator, Implementation
from swarmfab.goal import Goal
from swarmfab.knowledge import Store
from swarmfab.records import Candidate
from swarmfab.sandbox import JobStatus, Limits, run_job
from swarmfab.swarm import Run
from swarmfab.swarm.executors import Beside, Evaluation, LocalExecutor, default_workers
from swarmfab.workloads import Case, design_space, get_workload

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")


# -- the core broker ------------------------------------------------------------------
def test_leases_never_share_a_core_and_do_run_side_by_side() -> None:
    broker = CoreBroker([0, 1])
    busy: set[int] = set()
    lock = threading.Lock()
    overlaps, most = [], [0]

    def work(count: int) -> None:
        with broker.lease(count) as cores:
            with lock:
                overlaps.extend(set(cores) & busy)
                busy.update(cores)
                most[0] = max(most[0], len(busy))
            time.sleep(0.05)
            with lock:
                busy.difference_update(cores)

    threads = [threading.Thread(target=work, args=(1 + i % 2,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert most[0] == 2  # two one-core leases (or one two-core lease) held at once


def test_a_lease_larger_than_the_host_takes_every_core() -> None:
    broker = CoreBroker([3, 5])
    with broker.lease(8) as cores:
        assert cores == (3, 5)


def test_idle_time_is_the_time_without_any_lease() -> None:
    now = [0.0]
    broker = CoreBroker([0, 1], clock=lambda: now[0])
    now[0] = 2.0
    with broker.lease(1):
        now[0] = 5.0
        with broker.lease(1):
            now[0] = 6.0
    now[0] = 7.5
    assert broker.idle_seconds() == pytest.approx(2.0 + 1.5)


def test_pool_size_follows_the_host() -> None:
    assert default_workers(cores=2, threads=1) == 2
    assert default_workers(cores=2, threads=2) == 1
    assert default_workers(cores=16, threads=4) == 4
    assert default_workers(cores=1, threads=8) == 1


def test_a_cuda_evaluator_runs_one_evaluation_at_a_time(tmp_path: Path) -> None:
    """Two benchmarks on one device would disturb each other's timings."""
    workload = get_workload("kda")
    evaluator = Evaluator(workload, workload.default_shapes, tmp_path, threads=1,
                          tolerances=workload.tolerances(torch.float32), limits=Limits(),
                          cores=CoreBroker((0, 1)), device="cuda")
    executor = LocalExecutor(evaluator, workers=2)
    try:
        assert executor.capacity == 1
        assert evaluator.recipe().device == "cuda"
    finally:
        executor.close()


# -- jobs on leased cores, and cancelled ---------------------------------------------------
def _affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_a_job_runs_only_on_its_leased_cores() -> None:
    core = max(os.sched_getaffinity(0))
    outcome = run_job(_affinity, limits=Limits(cores=(core,)))
    assert outcome.status is JobStatus.OK and outcome.value == [core]


def test_a_cancelled_job_is_killed_at_once() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    outcome = run_job(_sleep, 60.0, limits=Limits(wall_s=60), cancel=cancel)
    assert outcome.status is JobStatus.CANCELLED
    assert time.monotonic() - started < 10


# -- whole runs with two workers -----------------------------------------------------
# the evaluation count ends these runs; the budget only has to be out of the way on a
# loaded machine
GOAL = {"workload": "kda", "budget": "300s", "threads": 1, "workers": 2, "seed": 3,
        "shapes": [{"B": 1, "T": 64, "H": 2, "K": 16, "V": 16}]}


def _run(tmp_path: Path, goal: Goal, executor: Callable[[Evaluator, int | None], LocalExecutor]
         ) -> tuple[Run, Store]:
    workload = get_workload(goal.workload)
    store = Store(tmp_path / "x.db")
    evaluator = Evaluator(workload, goal.target_shapes(), tmp_path / "cache", threads=1,
                          tolerances=workload.tolerances(torch.float32),
                          limits=Limits(wall_s=60), seed=goal.seed)
    space = design_space(goal.workload)
    run = Run(goal, store, evaluator, space, domain_agents(space.knobs), tmp_path,
              log=lambda line: None, fallback=RestartAgent(), executor=executor)
    return run, store


class _Recording(LocalExecutor):
    """A local executor that remembers what it was given and how much ran at once."""

    def __init__(self, evaluator: Evaluator, workers: int | None = 2):
        super().__init__(evaluator, workers)
        self.submitted: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        with self._lock:
            self.submitted.append(candidate.id)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        future = super().submit(candidate, incumbents, extra_cases, beside)
        future.add_done_callback(lambda _: self._finished())
        return future

    def _finished(self) -> None:
        with self._lock:
            self.in_flight -= 1


@needs_gcc
@two_cores
@pytest.mark.slow
def test_two_workers_never_evaluate_one_candidate_twice(tmp_path: Path) -> None:
    goal = Goal.model_validate({**GOAL, "max_evaluations": 8})
    run, store = _run(tmp_path, goal, _Recording)
    result = run.execute()
    executor = run.executor
    assert isinstance(executor, _Recording)
    assert result.status == "finished" and result.evaluations == 8
    assert len(executor.submitted) == len(set(executor.submitted)) == 8
    assert executor.most_in_flight == 2  # the two workers did run side by side
    verdicts = store.verdicts(result.run_id)
    assert sorted(row.candidate_id for row, _ in verdicts) == sorted(executor.submitted)
    assert result.champion is not None


class _HeldBack(LocalExecutor):
    """Evaluates the first two candidates side by side, then hands their verdicts back
    in order, so the second is judged after the first became champion. ``judged`` counts
    the verdicts the run loop has handled: the second waits for the first's (60 s at most;
    ``gave_up`` says it did not come)."""

    def __init__(self, evaluator: Evaluator, judged: Callable[[], int]):
        super().__init__(evaluator, workers=2)
        self.judged = judged
        self.gave_up = False
        self.futures: list[Future[Evaluation]] = []

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        inner = super().submit(candidate, incumbents, extra_cases, beside)
        held: Future[Evaluation] = Future()
        self.futures.append(held)
        if len(self.futures) <= 2:
            index = len(self.futures) - 1

            def release(done: Future[Evaluation]) -> None:
                if index == 1:
                    self._wait_for_the_first_verdict()
                held.set_result(done.result())

            inner.add_done_callback(lambda done: threading.Thread(
                target=release, args=(done,)).start())
        else:
            inner.add_done_callback(lambda done: held.set_result(done.result()))
        return held

    def _wait_for_the_first_verdict(self) -> None:
        """Until the run loop has judged the first candidate (and crowned it)."""
        deadline = time.monotonic() + 60
        while self.judged() < 1:
            if time.monotonic() > deadline:
                self.gave_up = True
                return
            time.sleep(0.01)


@needs_gcc
@two_cores
@pytest.mark.slow
def test_a_candidate_timed_against_a_dethroned_incumbent_is_timed_again(
    tmp_path: Path,
) -> None:
    goal = Goal.model_validate({**GOAL, "max_evaluations": 2})
    run, store = _run(tmp_path, goal,
                      lambda evaluator, workers: _HeldBack(evaluator, lambda: run.evaluations))
    result = run.execute()
    assert isinstance(run.executor, _HeldBack) and not run.executor.gave_up
    verdicts = store.verdicts(result.run_id)
    assert len(verdicts) == 2
    first, second = (row.candidate_id for row, _ in verdicts)
    assert verdicts[0][0].became_champion, "the first beats the baselines"
    rematches = store.events(result.run_id, "rematch")
    assert len(rematches) == 1 and rematches[0][1].startswith(second)
    # crowned only if it beat the first champion in the rematch
    assert result.champion is not None
    assert result.champion.id in (first, second)


@needs_gcc
@pytest.mark.slow
def test_a_stagnating_run_is_redirected_and_the_intervention_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmfab.swarm import gate
    from swarmfab.swarm import run as run_module
    from swarmfab.swarm.supervisor import Supervisor

    # A plateau made certain: after the first champion the gate crowns nothing, so the
    # test does not depend on whether noise or a real gain crowns the next few (the
    # gate's own rules are tested in test_gate.py).
    crowned_once: list[bool] = []

    def plateau(verdict, same_code=()):
        decision = gate.judge(verdict, same_code)
        if decision.promote and crowned_once:
            return gate.GateDecision(False, "plateau (test)")
        if decision.promote:
            crowned_once.append(True)
        return decision

    monkeypatch.setattr(run_module, "judge", plateau)
    goal = Goal.model_validate({**GOAL, "workers": 1, "max_evaluations": 7})
    run, store = _run(tmp_path, goal, LocalExecutor)
    run.supervisor = Supervisor(patience=2, turns=2)
    result = run.execute()
    interventions = store.events(result.run_id, "intervention")
    crowned = [(row.agent, row.became_champion, v.status.value, v.reason[:60])
               for row, v in store.verdicts(result.run_id)]
    assert interventions and "no new champion for 2 evaluations" in interventions[0][1], crowned
    agents = [row.agent for row, _ in store.verdicts(result.run_id)]
    assert "builtin-restart" in agents[3:], f"no exploration after the intervention: {agents}"


@needs_gcc
def test_a_budget_that_ends_during_the_battery_leaves_the_verdict_uncrowned(
        tmp_path: Path) -> None:
    """The budget's end cancels the battery before a crowning: the run goes on to its end
    with the verdict recorded and nothing crowned on an unfinished battery."""
    from swarmfab.evaluation import Cancelled

    goal = Goal.model_validate({**GOAL, "workers": 1, "max_evaluations": 2})
    run, store = _run(tmp_path, goal, LocalExecutor)

    def cancelled(candidate: Candidate, fast: object = None) -> None:
        raise Cancelled("the run is stopping")

    run.evaluator.verify_battery = cancelled  # type: ignore[method-assign]
    result = run.execute()
    verdicts = store.verdicts(result.run_id)
    assert verdicts and any(v.status.value == "accepted" for _, v in verdicts)
    assert result.champion is None and not any(row.became_champion for row, _ in verdicts)

