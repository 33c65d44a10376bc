"""The run loop: propose, evaluate, gate, record; until the budget is spent.

Agents never propose a candidate that already has a verdict in the run (they see the
judged ids in their context), and the store's unique (run, candidate) index backs that.

One direction of calls: the loop asks agents for proposals, the evaluator for verdicts,
the gate for decisions and the store to remember. Agents, evaluator and store never call
back into the loop.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swarmfab.agents import Agent, Context
from swarmfab.backends import get_backend
from swarmfab.errors import StoreError, SwarmfabError
from swarmfab.evaluation import Evaluator, Implementation, SideBySide
from swarmfab.goal import Goal
from swarmfab.kernels import DesignSpace
from swarmfab.knowledge import Store
from swarmfab.measure import CONFIRMATION, TimingPolicy
from swarmfab.records import Candidate, Lesson, Status, Verdict
from swarmfab.swarm.archive import Archive, knob_descriptor
from swarmfab.swarm.blackboard import Blackboard
from swarmfab.swarm.gate import judge
from swarmfab.swarm.hosts import host_peaks
from swarmfab.swarm.status import RunStatus, StatusTracker
from swarmfab.swarm.supervisor import Supervisor
from swarmfab.verify import draw_cases
from swarmfab.workloads import Case

__all__ = ["Run", "RunResult"]

FINAL_SHARE = 0.2  # of the budget kept for the closing side-by-side measurement
# baselines only pick the first incumbent; candidates are then timed against it directly
CALIBRATION = TimingPolicy(min_rounds=3, max_rounds=10, max_seconds=2.0, warmup_calls=1)
FUZZ_PER_EVALUATION = 3  # fresh random cases added to the corpus cases of every evaluation


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
        lessons: Sequence[Lesson] = (),
    ):
        self.goal, self.store, self.evaluator, self.space = goal, store, evaluator, space
        self.agents, self.workdir, self._log = list(agents), workdir, log
        self.fallback = fallback  # asked only when every agent is out of proposals
        self.observer = observer  # live displays get snapshots, never the run itself
        self.lessons = tuple(lessons)  # from earlier runs, for the agents' contexts
        self.tracker = StatusTracker(goal.budget_s)
        self.rng = random.Random(goal.seed)
        self.champion: Candidate | None = None
        self.incumbents: dict[str, Implementation] = {}
        self.baseline_incumbents: dict[str, Implementation] = {}
        self.recent: list[Verdict] = []
        self._started = time.monotonic()
        self.supervisor = Supervisor()
        self.blackboard = Blackboard()
        self.archive = Archive(knob_descriptor(tuple(
            knob.name for knob in space.knobs if knob.domain in ("algorithm", "parallelism"))))
        self.champion_gain = 1.0  # the champion's geometric-mean speedup over the baselines
        self.overhead: float | None = None  # share of search time not spent in real work
        self._turn, self._explore_turns = 0, 0
        self.evaluations = 0  # in this session (a resumed run counts from zero again)
        self._benched: dict[str, int] = {}

    def log(self, line: str) -> None:
        self._log(f"{time.monotonic() - self._started:6.1f}s {line}")

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
        started = self._started = time.monotonic()
        run_id = self.tracker.run_id = self._open(resume)
        self.blackboard.mark_judged(frozenset(self.store.evaluated_ids(run_id)))
        self.blackboard.subscribe("*", lambda e: self.store.record_event(run_id, e.kind, e.detail))
        status, final, champion_dir = "interrupted", [], None
        baselines: list[str] = []
        try:
            baselines = self._prepare()
            deadline = started + self.goal.budget_s * (1 - FINAL_SHARE)
            self._phase("searching")
            searched, worked = time.monotonic(), self.evaluator.work_s
            self._search(run_id, deadline)
            self.overhead = _overhead(time.monotonic() - searched, self.evaluator.work_s - worked)
            self.log(f"platform overhead: {self.overhead:.1%} of the search's wall time "
                     "(time not spent building, verifying or timing)")
            if self.champion is not None:
                self._phase("confirming the champion side by side")
                self.log("search over: timing the champion and the baselines side by side")
                champion_dir = self._write_champion(run_id)
                final = self.evaluator.side_by_side(
                    [Implementation("champion", artifact=self.evaluator.build(self.champion)),
                     *[Implementation(name, baseline=name) for name in baselines]],
                    self._final_policy(started),
                )
            status = "finished"
        except KeyboardInterrupt:
            self.log(f"interrupted: everything so far is recorded; continue with "
                     f"`swarmfab resume {run_id}`")
        except SwarmfabError:
            status = "failed"  # the platform, not a candidate: the CLI reports the error
            raise
        finally:
            summary = _summary(self.champion, final, champion_dir)
            summary["archive"] = self.archive.summary()
            summary["overhead"] = self.overhead
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
                                          self._host())
            self.log(f"run {run_id}: {self.goal.workload}, {len(self.evaluator.targets)} target "
                     f"shape(s), budget {self.goal.budget_s:.0f} s, {len(self.agents)} agent(s)")
            return run_id
        record = self.store.run(resume)
        self.store.reopen_run(record.id)
        if record.champion_id is not None:
            self.champion = self.store.candidate(record.champion_id)
        done = len(self.store.evaluated_ids(record.id))
        self.rng = random.Random(f"{self.goal.seed}/{done}")  # fresh draws, not a replay
        self.log(f"resuming run {record.id}: {done} candidates already judged, champion "
                 f"{self.champion.id if self.champion else 'none'}; budget "
                 f"{self.goal.budget_s:.0f} s")
        return record.id

    def _prepare(self) -> list[str]:
        """References, host peaks and the baselines' timing: before any candidate runs."""
        self._phase("computing references and host peaks")
        self.evaluator.prepare()
        self.evaluator.peaks = host_peaks(self.store, self.goal.threads, self.evaluator.limits,
                                          refresh=True)
        peaks = self.evaluator.peaks
        self.log(f"host peaks: {peaks.flops_per_s / 1e9:.0f} GFLOP/s float32 GEMM, "
                 f"{peaks.bytes_per_s / 1e9:.1f} GB/s copy ({self.goal.threads} threads)")
        self._phase("timing the baselines")
        baselines = self._calibrate()
        if self.champion is not None:  # a resumed run's champion is the incumbent again
            self._make_incumbent(self.champion)
        return baselines

    def _calibrate(self) -> list[str]:
        """Time the baselines once; the fastest on each shape is the first incumbent.

        Baselines that compile (torch.compile) are timed and shown, but never become the
        incumbent: candidates are then never timed in a job that may start processes."""
        workload = self.evaluator.workload
        compiling = workload.compiling_baselines
        names = list(self.goal.baselines or workload.default_baselines())
        if all(name in compiling for name in names):  # someone must be able to be incumbent
            names += [n for n in workload.default_baselines() if n not in compiling]
        eligible = [name for name in names if name not in compiling]
        tables = self.evaluator.side_by_side(
            [Implementation(n, baseline=n) for n in names], CALIBRATION
        )
        for table in tables:
            fastest = min(eligible, key=lambda n: table.seconds[n].median)
            self.incumbents[table.shape] = Implementation(fastest, baseline=fastest)
            times = ", ".join(f"{n} {table.seconds[n].median * 1e3:.1f} ms" for n in names)
            self.log(f"baselines on {table.shape}: {times}")
        self.baseline_incumbents = dict(self.incumbents)
        return names

    def _search(self, run_id: str, deadline: float) -> None:
        while time.monotonic() < deadline and not self._out_of_evaluations(self.evaluations):
            proposal = self._next_proposal()
            if proposal is None:
                self.log("every agent is out of proposals: the space is exhausted")
                break
            agent, candidate = proposal
            if not self.blackboard.claim(candidate.id, agent.id):
                continue  # someone else holds it, or it was judged meanwhile
            self.tracker.activity[agent.id] = f"{candidate.id[:10]}: evaluating"
            self._observe()
            try:
                promoted = self._evaluate(run_id, candidate, self.evaluations + 1)
            finally:
                self.blackboard.release(candidate.id, judged=True)
            self.evaluations += 1
            self._remember(agent, candidate, promoted)
            self.tracker.evaluated(agent.id, candidate.id, self.recent[-1], promoted)
            self._supervise(run_id, agent, promoted)
            self._observe()

    def _next_proposal(self) -> tuple[Agent, Candidate] | None:
        """Ask agents in turn (skipping benched ones), each with its island's parents; the
        fallback when all are dry or the supervisor asked for exploration."""
        if self._explore_turns > 0 and self.fallback is not None:
            self._explore_turns -= 1
            found = self.fallback.propose(self._context(), limit=1)
            if found:
                return self.fallback, found[0]
        for _ in range(len(self.agents)):
            agent = self.agents[self._turn % len(self.agents)]
            self._turn += 1
            if self._benched.get(agent.id, 0) > 0:
                self._benched[agent.id] -= 1
                continue
            found = agent.propose(self._context(agent), limit=1)
            if found:
                return agent, found[0]
        if self.fallback is None:
            return None
        found = self.fallback.propose(self._context(), limit=1)
        return (self.fallback, found[0]) if found else None

    def _supervise(self, run_id: str, agent: Agent, promoted: bool) -> None:
        intervention = self.supervisor.observe(agent.id, self.recent[-1], promoted)
        if intervention is None:
            return
        if intervention.kind == "explore":
            self._explore_turns = intervention.turns
        elif intervention.agent is not None:
            self._benched[intervention.agent] = intervention.turns
        self.blackboard.publish("intervention", f"{intervention.kind}: {intervention.reason}")
        self.log(f"supervisor: {intervention.reason}")

    def _context(self, agent: Agent | None = None) -> Context:
        evaluated = self.blackboard.judged()  # the store's verdicts, without a query
        island = self._island(agent) if agent is not None else 0
        parents = tuple(self.archive.sample(island, self.rng))
        return Context(self.goal, self.space, self.champion, evaluated,
                       tuple(self.recent[-20:]), self.lessons, self.rng, parents)

    def _island(self, agent: Agent) -> int:
        return self.agents.index(agent) % self.archive.islands if agent in self.agents else 0

    def _remember(self, agent: Agent, candidate: Candidate, promoted: bool) -> None:
        """File a verified candidate in the archive, its fitness relative to the baselines."""
        verdict = self.recent[-1]
        if verdict.status is not Status.ACCEPTED or not verdict.timings:
            return
        speedups = [t.ratio.inverted().median for t in verdict.timings]
        relative = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        fitness = self.champion_gain * relative  # it was timed against the incumbent
        self.archive.add(candidate, fitness, self._island(agent))
        if promoted:
            self.champion_gain = fitness

    def _evaluate(self, run_id: str, candidate: Candidate, number: int) -> bool:
        fuzz = draw_cases(self.evaluator.workload, self.rng, FUZZ_PER_EVALUATION)
        verdict = self.evaluator.evaluate(candidate, self.incumbents, fuzz)
        self.store.record(run_id, candidate, verdict)
        self.recent.append(verdict)
        failed = verdict.failed_check
        counterexample = self.evaluator.case_of(failed, fuzz) if failed else None
        if counterexample is not None:
            self._grow_corpus(run_id, counterexample, candidate)
        decision = judge(verdict)
        line = f"[{number:3d}] {candidate.agent:<20} {candidate.id[:10]} {verdict.status.value:<12}"
        if verdict.status is Status.ACCEPTED:
            speedups = " ".join(f"{t.ratio.inverted().median:.2f}x" for t in verdict.timings)
            line += f" {speedups} vs incumbent"
        else:
            line += f" {verdict.reason[:100]}"
        if decision.promote:
            self._crown(run_id, candidate)
            line += "  -> new champion"
        self.log(line + f"  ({candidate.rationale})")
        return decision.promote

    def _grow_corpus(self, run_id: str, found: Case, candidate: Candidate) -> None:
        """Keep a fuzzing counterexample forever, and re-check the champion against it."""
        case = replace(found, origin=f"fuzz: broke candidate {candidate.id}")
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
            self.champion = None
            self.incumbents = dict(self.baseline_incumbents)
            self.tracker.demoted()
            self.champion_gain = 1.0

    def _crown(self, run_id: str, candidate: Candidate) -> None:
        self.champion = candidate
        self.store.set_champion(run_id, candidate.id)
        self._make_incumbent(candidate)
        self.blackboard.publish("champion-changed", f"{candidate.id} by {candidate.agent}: "
                                f"{candidate.rationale}")

    def _make_incumbent(self, candidate: Candidate) -> None:
        artifact = self.evaluator.build(candidate)  # cached: no recompilation
        for shape in self.incumbents:
            self.incumbents[shape] = Implementation("champion", artifact=artifact)

    def _final_policy(self, started: float) -> TimingPolicy:
        """The confirmation policy, capped so the whole run stays near its budget."""
        left = self.goal.budget_s - (time.monotonic() - started)
        per_shape = max(1.0, 0.7 * left / len(self.evaluator.targets))
        return replace(CONFIRMATION, max_seconds=min(CONFIRMATION.max_seconds, per_shape))

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

    def _host(self) -> dict[str, Any]:
        import platform

        return {"machine": platform.machine(), "node": platform.node(),
                "threads": self.goal.threads, **get_backend(self.space.backend).describe()}


def _summary(champion: Candidate | None, final: list[SideBySide], where: Path | None
             ) -> dict[str, Any]:
    shapes = []
    for table in final:
        baselines = {n: e for n, e in table.seconds.items() if n != "champion"}
        fastest = min(baselines, key=lambda n: baselines[n].median)
        shapes.append({
            "shape": table.shape,
            "seconds": {n: [e.median, e.low, e.high] for n, e in table.seconds.items()},
            "fastest_baseline": fastest,
            "speedup": list(_as_tuple(table.ratio_to_reference[fastest])),
            "samples": table.samples,
            "roofline_fraction": table.roofline_fraction("champion"),
        })
    return {"champion": champion.id if champion else None,
            "champion_dir": str(where) if where else None, "shapes": shapes}


def _as_tuple(estimate: Any) -> tuple[float, float, float]:
    values = (estimate.median, estimate.low, estimate.high)
    return tuple(v if math.isfinite(v) else float("nan") for v in values)  # type: ignore[return-value]


def _overhead(wall_s: float, work_s: float) -> float | None:
    return None if wall_s <= 0 else max(0.0, 1 - work_s / wall_s)
