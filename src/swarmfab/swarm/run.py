"""The run loop: propose, evaluate, gate, record; until the budget is spent.

Up to the executor's capacity, evaluations run at once; this loop (one thread) keeps
them fed with proposals and handles each result as it completes: record, grow the corpus,
gate, archive, supervise. Agents never propose a candidate that is judged or claimed by
an evaluation in flight (they see those ids in their context); the blackboard's claims
and the store's unique (run, candidate) index back that.

A candidate timed against an incumbent that has since been dethroned is timed again
against the current champion before it may take its place (a rematch).

One direction of calls: the loop asks agents for proposals, the executor for verdicts,
the gate for decisions and the store to remember. None of them calls back into the loop.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmfab.agents import Agent, Context
from swarmfab.errors import StoreError, SwarmfabError
from swarmfab.evaluation import Cancelled, Evaluator, Implementation, SideBySide
from swarmfab.goal import Goal
from swarmfab.kernels import DesignSpace
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Lesson, Status, Verdict
from swarmfab.swarm.archive import Archive, fitness_of, knob_descriptor
from swarmfab.swarm.blackboard import Blackboard
from swarmfab.swarm.budget import Budget
from swarmfab.swarm.closing import closing_reserve, confirm, late_beside, summarise
from swarmfab.swarm.executors import Evaluation, Executor, ExecutorFactory, LocalExecutor
from swarmfab.swarm.gate import GateDecision, judge, same_code_shapes
from swarmfab.swarm.hosts import PeaksRecheck, host_record
from swarmfab.swarm.setup import Calibration, Setup
from swarmfab.swarm.status import RunStatus, StatusTracker
from swarmfab.swarm.supervisor import Intervention, Supervisor
from swarmfab.swarm.turns import Turns
from swarmfab.verify import draw_cases
from swarmfab.workloads import Case

if TYPE_CHECKING:
    from swarmfab.agents.llm import Reviewer

__all__ = ["Run", "RunResult"]

FUZZ_PER_EVALUATION = 3  # fresh random cases added to the corpus cases of every evaluation


@dataclass(frozen=True, slots=True)
class _Submission:
    """An evaluation in flight: who proposed it and what it is timed against."""

    agent: Agent
    candidate: Candidate
    incumbent: str | None  # the champion's id when submitted (None: the baselines)
    gain: float  # that incumbent's geometric-mean speedup over the baselines
    corpus: int  # how many corpus cases there were (later ones are checked before crowning)
BOARD_KINDS = frozenset({"champion-changed", "corpus-grew", "demoted", "intervention",
                         "llm-review"})  # what agents are shown of the blackboard
BOARD_SIZE = 12
IDLE_PAUSE_S = 0.5  # between rounds in which every agent had nothing for now


@dataclass(slots=True)
class RunResult:
    run_id: str
    champion: Candidate | None
    champion_dir: Path | None
    evaluations: int
    counts: dict[str, int]
    final: list[SideBySide] = field(default_factory=list)
    baselines: list[str] = field(default_factory=list)
    status: str = "finished"


class Run:
    """One optimisation run of one goal."""

    def __init__(
        self, goal: Goal, store: Store, evaluator: Evaluator, space: DesignSpace,
        agents: Sequence[Agent], workdir: Path, log: Callable[[str], None] = print,
        fallback: Agent | None = None, observer: Callable[[RunStatus], None] | None = None,
        executor: ExecutorFactory | None = None,
        reviewer: Reviewer | None = None,
        lessons: Sequence[Lesson] = (),
        started: float | None = None,
    ):
        self.goal, self.store, self.evaluator, self.space = goal, store, evaluator, space
        self.agents, self.workdir, self._log = list(agents), workdir, log
        self.turns = Turns(self.agents, fallback)  # who proposes next
        self.observer = observer  # live displays get snapshots, never the run itself
        # makes the executor once the references and peaks exist (default: a local pool)
        self.executor_factory: ExecutorFactory = executor or LocalExecutor
        self.executor: Executor | None = None  # during and after the search
        self.reviewer = reviewer  # reads LLM-authored champions' diffs; advisory only
        self.lessons = tuple(lessons)  # from earlier runs, for the agents' contexts
        self.rng = random.Random(goal.seed)
        self.champion: Candidate | None = None
        self.champion_verdict: Verdict | None = None
        self.incumbents: dict[str, Implementation] = {}
        self.baseline_incumbents: dict[str, Implementation] = {}
        self.recent: list[Verdict] = []
        # the budget counts from when the command started (``started``, a monotonic
        # instant the CLI takes first thing), setup included
        self.budget = Budget(time.monotonic() if started is None else started, goal.budget_s)
        self.calibration: Calibration | None = None
        self.closing_s = 0.0  # what the closing table's fewest rounds take (estimated)
        self.tracker = StatusTracker(goal.budget_s, self.budget.started)
        self.supervisor = Supervisor()
        self.recheck_peaks = PeaksRecheck(store, evaluator, goal.threads, goal.device, self.log)
        self.blackboard = Blackboard()
        self.archive = Archive(knob_descriptor(tuple(
            knob.name for knob in space.knobs if knob.domain in ("algorithm", "parallelism"))))
        self.champion_gain = 1.0  # the champion's geometric-mean speedup over the baselines
        self.overhead: float | None = None  # share of search time not spent in real work
        self.search_s = 0.0
        self.battery_s = 0.0  # the battery's share of the search: checks before crownings
        self.workers = 0  # evaluations in flight at once, once the search started
        self.evaluations = 0  # in this session (a resumed run counts from zero again)

    def log(self, line: str) -> None:
        self._log(f"{self.budget.elapsed():6.1f}s {line}")

    def _phase(self, phase: str) -> None:
        self.tracker.phase = phase
        self._observe()

    def _observe(self) -> None:
        if self.observer is not None:
            self.observer(self.tracker.snapshot())

    def execute(self, resume: str | None = None) -> RunResult:
        """Run the goal (or continue run ``resume``) until the budget is spent.

        Ctrl-C stops the search gracefully: everything evaluated so far is recorded and the
        run is marked ``interrupted``; ``resume`` continues it without re-evaluating.
        """
        setup = Setup(self.goal, self.store, self.evaluator, self.log, self._phase)
        self._phase("estimating the setup")
        setup.check(self.budget)  # a budget the setup alone would not fit: refused here
        run_id = self.tracker.run_id = self._open(resume)
        self.blackboard.mark_judged(frozenset(self.store.evaluated_ids(run_id)))
        self.blackboard.subscribe("*", lambda e: self.store.record_event(run_id, e.kind, e.detail))
        status, final, champion_dir = "interrupted", [], None
        baselines: list[str] = []
        try:
            baselines = self._prepare(setup)
            self._phase("searching")
            searched, idle = time.monotonic(), self.evaluator.cores.idle_seconds()
            self._search_with_executor(run_id)
            self.search_s = time.monotonic() - searched
            if self.executor is not None and self.executor.on_this_host:
                self.overhead = _share(self.evaluator.cores.idle_seconds() - idle,
                                       self.search_s)
            if self.evaluations and self.overhead is not None:
                self.log(f"platform overhead: {self.overhead:.1%} of the search's wall time "
                         "(no core building, verifying or timing)")
            if self.battery_s:
                self.log(f"verification battery before crownings: {self.battery_s:.1f} s "
                         f"({_share(self.battery_s, self.search_s) or 0:.1%} of the search)")
            if self.champion is not None and self.calibration is not None:
                champion_dir = self._write_champion(run_id)
                self._phase("confirming the champion side by side")
                final = confirm(self.evaluator, self.calibration, self.champion,
                                self.champion_verdict, baselines, self.budget.left(),
                                self.closing_s, self.log)
                setup.remember(final)
            status = "finished"
        except KeyboardInterrupt:
            self.log(f"interrupted: everything so far is recorded; continue with "
                     f"`swarmfab resume {run_id}`")
        except SwarmfabError:
            status = "failed"  # the platform, not a candidate: the CLI reports the error
            self.log(f"stopped by the error below; what is recorded stays: `swarmfab resume "
                     f"{run_id}` continues")
            raise
        finally:
            summary = {**summarise(self.champion, final, champion_dir),
                       "archive": self.archive.summary(), "overhead": self.overhead,
                       "dtype": self.goal.dtype, "search": {
                           "seconds": self.search_s, "evaluations": self.evaluations,
                           "workers": self.workers, "battery_seconds": self.battery_s}}
            self._close(run_id, status, summary)
        return RunResult(run_id, self.champion, champion_dir, self.evaluations,
                         self.store.status_counts(run_id), final, baselines, status)

    def _close(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        """Record how the run ended; a store that cannot take it (full disk) is logged,
        not raised over the error that ended the run."""
        try:
            self.store.finish_run(run_id, status, summary)
        except StoreError as exc:
            self.log(f"could not record the end of run {run_id}: {exc}")
        self._phase(status)

    # -- phases --------------------------------------------------------------------
    def _open(self, resume: str | None) -> str:
        if resume is None:
            run_id = self.store.start_run(self.goal.workload, self.goal.model_dump(mode="json"),
                                          host_record(self.goal.threads, self.space.backend))
            inputs = "" if self.goal.dtype == "float32" else f", inputs in {self.goal.dtype}"
            self.log(f"run {run_id}: {self.goal.workload}, {len(self.evaluator.targets)} target "
                     f"shape(s){inputs}, {self.budget.describe()}, {len(self.agents)} agent(s)")
            return run_id
        record = self.store.run(resume)
        self.store.reopen_run(record.id)
        if record.champion_id is not None:
            self.champion = self.store.candidate(record.champion_id)
            self.champion_verdict = next((v for _, v in self.store.verdicts(record.id)
                                          if v.candidate_id == record.champion_id), None)
        done = len(self.store.evaluated_ids(record.id))
        self.rng = random.Random(f"{self.goal.seed}/{done}")  # fresh draws, not a replay
        self.log(f"resuming run {record.id}: {done} candidates already judged, champion "
                 f"{self.champion.id if self.champion else 'none'}; "
                 f"{self.budget.describe()}")
        return record.id

    def _prepare(self, setup: Setup) -> list[str]:
        """References, host peaks and the baselines (see :mod:`swarmfab.swarm.setup`);
        the fastest baseline on each shape is the first incumbent."""
        calibration = self.calibration = setup.run(deadline=self.budget.end)
        self.closing_s = closing_reserve(calibration, calibration.inputs_s)
        for label, name in calibration.fastest.items():
            self.incumbents[label] = Implementation(name, baseline=name)
        self.baseline_incumbents = dict(self.incumbents)
        if self.champion is not None:  # a resumed run's champion is the incumbent again
            self._make_incumbent(self.champion)
        self._keep_reserve(first=True)
        left = self.budget.search_end - time.monotonic()
        if left <= 0:
            self.log(f"the setup took {self.budget.elapsed():.0f} s, past the search's share "
                     "of the budget: nothing will be evaluated; give a larger budget")
        return list(calibration.names)

    def _keep_reserve(self, first: bool = False) -> None:
        """Keep the closing table's time free of evaluations once there is a champion to
        confirm; until then, late evaluations time the baselines themselves (see
        :mod:`swarmfab.swarm.closing`)."""
        needed = self.champion is not None
        reserve = self.closing_s if needed else 0.0
        if reserve == self.budget.reserve_s and not first:
            return
        self.budget = replace(self.budget, reserve_s=reserve)
        kept = (f"{reserve:.0f} s kept for the closing table" if needed else
                f"the closing table needs about {self.closing_s:.0f} s: an evaluation that "
                "may end later times its fastest baselines beside the candidate")
        self.log(f"{kept}; no evaluation starts after "
                 f"{self.budget.search_end - self.budget.started:.0f} s")

    def _search_with_executor(self, run_id: str) -> None:
        executor = self.executor = self.executor_factory(self.evaluator, self.goal.workers)
        self.workers = executor.capacity
        self.log(executor.describe())
        try:
            self._search(run_id, executor)
        except BaseException:
            executor.cancel()  # Ctrl-C or a platform error: stop the jobs in flight
            raise
        finally:
            executor.close()
            self.evaluator.resume()  # cancelled jobs stay cancelled; the closing benchmark runs

    def _search(self, run_id: str, executor: Executor) -> None:
        """Until the budget's search end (read afresh: a champion may move it)."""
        in_flight: dict[Future[Evaluation], _Submission] = {}
        exhausted = False
        while True:
            deadline, hard_deadline = self.budget.search_end, self.budget.hard_end
            if not exhausted:
                exhausted = self._fill(executor, in_flight, deadline)
            if not in_flight:
                if exhausted and time.monotonic() < deadline and any(
                        agent.may_propose_later() for agent in self.agents):
                    time.sleep(IDLE_PAUSE_S)  # e.g. LLM agents waiting out a provider failure
                    exhausted = False
                    continue
                if exhausted:
                    self.log("every agent is out of proposals: the space is exhausted")
                break
            now = time.monotonic()
            limit = (deadline if now < deadline else hard_deadline) - now
            done, _ = wait(list(in_flight), timeout=max(0.0, limit), return_when=FIRST_COMPLETED)
            if not done and time.monotonic() >= hard_deadline:
                self.log(f"budget spent: {len(in_flight)} evaluation(s) in flight cancelled")
                executor.cancel()
                done, _ = wait(list(in_flight))
            for future in done:
                self._complete(run_id, in_flight.pop(future), future)
            if done:
                exhausted = False  # a new verdict or champion may open new proposals

    def _fill(self, executor: Executor, in_flight: dict[Future[Evaluation], _Submission],
              deadline: float) -> bool:
        """Submit proposals until the executor is full; True when no agent has any."""
        while (len(in_flight) < executor.capacity and time.monotonic() < deadline
               and not self._out_of_evaluations(self.evaluations + len(in_flight))):
            proposal = self.turns.next(self._ask, self._context)
            if proposal is None:
                return True
            agent, candidate = proposal
            if self._champions_code_everywhere(candidate):
                continue
            if not self.blackboard.claim(candidate.id, agent.id):
                self._intervene(self.supervisor.refused(agent.id, candidate.id))
                continue  # judged or in flight already
            fuzz = draw_cases(self.evaluator.workload, self.rng, FUZZ_PER_EVALUATION)
            # while no time is kept for a closing table, a late evaluation times its
            # baselines (judged by the longest evaluation so far)
            expected = max((v.elapsed_s for v in self.recent), default=self.closing_s)
            late = late_beside(self.calibration, self.incumbents, self.budget, self.closing_s,
                               expected)
            future = executor.submit(candidate, self.incumbents, fuzz, late)
            in_flight[future] = _Submission(agent, candidate,
                                            self.champion.id if self.champion else None,
                                            self.champion_gain, len(self.evaluator.cases))
            self.tracker.activity[agent.id] = f"{candidate.id[:10]}: evaluating"
            self._observe()
        return False

    def _complete(self, run_id: str, submission: _Submission,
                  future: Future[Evaluation]) -> None:
        """Handle one finished evaluation; a cancelled one leaves no trace but its claim."""
        candidate = submission.candidate
        try:
            evaluation = future.result()
        except Cancelled:
            self.blackboard.release(candidate.id, judged=False)
            return
        try:
            promoted = self._judge(run_id, submission, evaluation, self.evaluations + 1)
        finally:
            self.blackboard.release(candidate.id, judged=True)
        self.evaluations += 1
        self._remember(submission, promoted)
        self.tracker.evaluated(submission.agent.id, candidate.id, self.recent[-1], promoted)
        self._supervise(run_id, submission.agent, promoted)
        self._observe()

    def _ask(self, agent: Agent, context: Context) -> list[Candidate]:
        """One proposal; what the agent reports doing (LLM calls, spend) is recorded."""
        try:
            return agent.propose(context, limit=1)
        finally:
            for kind, detail in agent.take_events():
                self.blackboard.publish(kind, detail)
                if kind not in ("llm-call",):
                    self.log(f"{agent.id}: {kind} {detail[:160]}")

    def _supervise(self, run_id: str, agent: Agent, promoted: bool) -> None:
        self._intervene(self.supervisor.observe(agent.id, self.recent[-1], promoted))

    def _intervene(self, intervention: Intervention | None) -> None:
        if intervention is None:
            return
        self.turns.follow(intervention)
        self.blackboard.publish("intervention", f"{intervention.kind}: {intervention.reason}")
        self.log(f"supervisor: {intervention.reason}")

    def _context(self, agent: Agent | None = None) -> Context:
        evaluated = self.blackboard.taken()  # judged (the store's verdicts) or in flight
        island = self._island(agent) if agent is not None else 0
        parents = tuple(self.archive.sample(island, self.rng))
        board = tuple(f"{e.kind}: {e.detail}" for e in self.blackboard.events()
                      if e.kind in BOARD_KINDS)[-BOARD_SIZE:]
        return Context(self.goal, self.space, self.champion, evaluated,
                       tuple(self.recent[-20:]), self.lessons, self.rng, parents,
                       self.champion_verdict, board, self.blackboard.claimed(),
                       deadline=self.budget.search_end)

    def _island(self, agent: Agent) -> int:
        return self.agents.index(agent) % self.archive.islands if agent in self.agents else 0

    def _remember(self, submission: _Submission, promoted: bool) -> None:
        """File a verified candidate in the archive, its fitness relative to the baselines."""
        fitness = fitness_of(self.recent[-1], submission.gain)  # timed against that incumbent
        if fitness is None:
            return
        self.archive.add(submission.candidate, fitness, self._island(submission.agent))
        if promoted:
            self.champion_gain = fitness

    def _judge(self, run_id: str, submission: _Submission, evaluation: Evaluation,
               number: int) -> bool:
        """Record a verdict, keep its counterexample, and crown it if the gate says so."""
        candidate = submission.candidate
        verdict = self.recheck_peaks(candidate, evaluation.verdict)
        self.store.record(run_id, candidate, verdict)
        self.recent.append(verdict)
        if evaluation.counterexample is not None:
            self._grow_corpus(run_id, evaluation.counterexample, candidate)
        current = self.champion.id if self.champion else None
        same = self._same_code(candidate) if submission.incumbent == current else []
        decision = judge(verdict, same)
        try:  # the checks before a crowning; the budget may end during any of them
            if decision.promote and len(self.evaluator.cases) > submission.corpus:
                decision = self._check_new_cases(candidate, submission.corpus)
            if decision.promote:
                decision = self._check_battery(run_id, candidate)
            if decision.promote and submission.incumbent != current:
                decision = self._rematch(run_id, candidate)
        except Cancelled:
            decision = GateDecision(False, "the budget ended before its checks did")
            self.log(f"not crowned: {candidate.id[:10]}: {decision.reason}")
        line = f"[{number:3d}] {candidate.agent:<20} {candidate.id[:10]} {verdict.status.value:<12}"
        if verdict.status is Status.ACCEPTED:
            speedups = " ".join(f"{t.ratio.inverted().median:.2f}x" for t in verdict.timings)
            line += f" {speedups} vs incumbent"
        else:
            line += f" {verdict.reason[:100]}"
        if decision.promote:
            self._crown(run_id, candidate)
            line += "  -> new champion"
        if same:
            line += f"  (not judged on {', '.join(same)}: the champion's code there)"
        self.log(line + f"  ({candidate.rationale})")
        return decision.promote

    def _champions_code_everywhere(self, candidate: Candidate) -> bool:
        """Whether ``candidate`` runs the champion's code on every target shape (a tile
        move on a decode-only goal): the gate could never crown it, so it is not evaluated,
        and it counts as judged for the rest of the run so no agent proposes it again."""
        if len(self._same_code(candidate)) < len(self.evaluator.targets):
            return False
        self.blackboard.mark_judged({candidate.id})
        self.blackboard.publish("skipped", f"{candidate.id}: runs the champion's code on "
                                           "every target shape")
        self.log(f"skipped: {candidate.agent} {candidate.id[:10]} runs the champion's code "
                 f"on every target shape ({candidate.rationale})")
        return True

    def _same_code(self, candidate: Candidate) -> list[str]:
        """Target shapes on which ``candidate`` runs the champion's (the incumbent's) code."""
        return same_code_shapes(self.space, candidate, self.champion, self.evaluator.targets)

    def _check_new_cases(self, candidate: Candidate, known: int) -> GateDecision:
        """The corpus grew while ``candidate`` was evaluated: it must pass the new cases."""
        new = self.evaluator.cases[known:]
        recheck = self.evaluator.verify(candidate, new)
        if recheck.status is Status.ACCEPTED:
            return GateDecision(True, f"also correct on {len(new)} case(s) added meanwhile")
        reason = f"fails a corpus case added while it was evaluated: {recheck.reason}"
        self.blackboard.publish("recheck-failed", f"{candidate.id}: {reason}")
        self.log(f"not crowned: {candidate.id[:10]} {reason[:120]}")
        return GateDecision(False, reason)

    def _check_battery(self, run_id: str, candidate: Candidate) -> GateDecision:
        """The second tier before a crowning: real sizes, extreme values, other layouts
        and thread counts. A case that fails joins the corpus, so every later candidate
        meets it in the fast tier."""
        began = time.monotonic()
        try:
            verdict = self.evaluator.verify_battery(candidate)
        finally:  # the budget may end it (Cancelled)
            self.battery_s += time.monotonic() - began
        if verdict.status is Status.ACCEPTED:
            self.store.record_event(run_id, "battery", f"{candidate.id} passed: "
                                    f"{verdict.reason}, {verdict.elapsed_s:.1f} s")
            return GateDecision(True, f"passed the battery: {verdict.reason}")
        reason = f"fails the verification battery: {verdict.reason}"
        self.store.record_event(run_id, "battery", f"{candidate.id} failed: {verdict.reason}")
        self.store.demote(run_id, candidate.id, reason)
        self.blackboard.publish("battery-failed", f"{candidate.id}: {reason}")
        self.log(f"not crowned: {candidate.id[:10]} {reason[:160]}")
        failed = verdict.failed_check
        found = self.evaluator.case_of(failed, self.evaluator.battery.cases()) if failed else None
        if found is not None:
            self._grow_corpus(run_id, replace(found, origin="battery"), candidate)
        return GateDecision(False, reason)

    def _rematch(self, run_id: str, candidate: Candidate) -> GateDecision:
        """The champion changed while ``candidate`` was timed: time it against the new one."""
        verdict = self.evaluator.rematch(candidate, self.incumbents)
        decision = judge(verdict, self._same_code(candidate))
        gains = " ".join(f"{t.ratio.inverted().median:.2f}x" for t in verdict.timings)
        detail = (f"{candidate.id} timed again against the current champion: "
                  f"{gains or verdict.reason[:100]}; {decision.reason}")
        self.blackboard.publish("rematch", detail)
        self.log(f"rematch: {detail}")
        return decision

    def _grow_corpus(self, run_id: str, found: Case, candidate: Candidate) -> None:
        """Keep a fuzzing (or battery) counterexample forever, and re-check the champion
        against it."""
        source = "battery" if found.origin == "battery" else "fuzz"
        case = replace(found, origin=f"{source}: broke candidate {candidate.id}")
        self.store.add_case(self.goal.workload, case, run_id)
        self.evaluator.add_case(case)
        self.log(f"corpus grew: {case.name} ({case.shape.label}) broke {candidate.id[:10]}")
        self.blackboard.publish("corpus-grew", f"{case.name} ({case.shape.label}) broke "
                                f"{candidate.id}")
        if self.champion is None:
            return
        recheck = self.evaluator.verify(self.champion, [case])
        if recheck.status is not Status.ACCEPTED:
            reason = f"fails new corpus case {case.name}: {recheck.reason}"
            self.store.demote(run_id, self.champion.id, reason)
            self.log(f"champion {self.champion.id[:10]} demoted: {reason}")
            self.blackboard.publish("demoted", f"{self.champion.id}: {reason}")
            self.champion, self.champion_verdict = None, None
            self.incumbents = dict(self.baseline_incumbents)
            self.tracker.demoted()
            self.champion_gain = 1.0
            self._keep_reserve()

    def _crown(self, run_id: str, candidate: Candidate) -> None:
        replaced = self.champion
        self.champion, self.champion_verdict = candidate, self.recent[-1]
        self.store.set_champion(run_id, candidate.id)
        self._make_incumbent(candidate)
        self._keep_reserve()
        self.blackboard.publish("champion-changed", f"{candidate.id} by {candidate.agent}: "
                                f"{candidate.rationale}")
        if self.reviewer is not None and self.reviewer.wants(candidate):
            if replaced is None:  # the first champion: show the diff from the starting point
                replaced = self.space.instantiate(self.space.default(), threads=self.goal.threads)
            review = self.reviewer.review(candidate, replaced, self.recent[-1])
            self.blackboard.publish("llm-review", review.to_json())
            self.log(f"reviewer on {candidate.id[:10]}: {review.opinion}")

    def _make_incumbent(self, candidate: Candidate) -> None:
        artifact = self.evaluator.build(candidate)  # cached: no recompilation
        for shape in self.incumbents:
            self.incumbents[shape] = Implementation("champion", artifact=artifact, source=candidate)

    def _out_of_evaluations(self, evaluations: int) -> bool:
        limit = self.goal.max_evaluations
        return limit is not None and evaluations >= limit

    def _write_champion(self, run_id: str) -> Path:
        assert self.champion is not None
        directory = self.workdir / "runs" / run_id / "champion"
        directory.mkdir(parents=True, exist_ok=True)
        for rel, text in self.champion.sources.items():
            (directory / rel).write_text(text)
        return directory


def _share(part_s: float, whole_s: float) -> float | None:
    return None if whole_s <= 0 else min(1.0, max(0.0, part_s / whole_s))
