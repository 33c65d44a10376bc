"""The engine factory's loop: recipes proposed by domain agents, verified, measured, gated.

One evaluation at a time: the candidates share the machine with the load generator, and
a measurement is only worth anything on a machine doing nothing else. The loop is the
kernel factory's in miniature, with the same parts:

1. the default recipe starts; its greedy tokens on the verification prompts are the
   reference, and it is the first incumbent;
2. the built-in bandit agents, one per domain of :func:`~swarmfab.serving.recipe.engine_space`,
   propose in turn around the champion, credited by the verdicts as for kernels; as
   for kernels, earlier engine runs' champions are proposed first and their lessons are
   the bandits' priors (``--no-lessons``: neither);
3. each candidate starts, is verified (the reference's greedy tokens, or the accuracy
   gate of :mod:`~swarmfab.serving.numerics` for another dtype), and is loaded
   alternately with the incumbent (:mod:`~swarmfab.serving.evaluate`); the kernel gate
   (:func:`~swarmfab.swarm.gate.judge`) crowns it only when it serves more with
   statistical support and meets the objective;
4. at the end the default and the champion are measured side by side again, so the
   gain the run reports is one measurement, not a product of steps. Time for that is
   kept back only once a recipe has been crowned: a crown over the default is itself
   such a measurement, and where no time is left to repeat it, it is the one reported.

Every verdict goes to the store as it arrives (run, candidates with their recipe as
source, verdicts, champion, events), so ``show``, ``runs`` and ``report`` read an engine
run as they read a kernel run, and ``export`` writes its recipe. A run stopped by Ctrl-C
(marked ``interrupted``) or killed (left ``running``) continues with ``swarmfab resume``:
the default starts again for its reference tokens, the recorded champion is the
incumbent again, and no recorded candidate is evaluated twice.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmfab.agents.base import Context
from swarmfab.agents.builtin.bandit import bandit_agents
from swarmfab.agents.builtin.recall import RecallAgent
from swarmfab.agents.builtin.starting import StartingPointsAgent
from swarmfab.engine.weights import parameter_count
from swarmfab.errors import EngineError, MissingExtraError
from swarmfab.knowledge import LessonContext, Store
from swarmfab.knowledge.recall import Recalled
from swarmfab.records import Candidate, CheckResult, Estimate, Lesson, Status, Verdict
from swarmfab.serving.engines import EngineAdapter, SpaceContext, get_engine
from swarmfab.serving.engines.own import auto_threads, same_under_traffic
from swarmfab.serving.evaluate import (
    Comparison,
    EngineProcess,
    EngineStartError,
    compare,
    comparison_verdict,
    greedy_tokens,
    load_once,
    measured,
    objective_check,
    verify_prompts,
    verify_tokens,
    warm_up,
)
from swarmfab.serving.goal import EngineGoal
from swarmfab.serving.numerics import Scores, numerics_checks, score_continuations
from swarmfab.swarm.gate import judge

try:  # the engine extra
    import httpx
except ImportError as exc:
    raise MissingExtraError("httpx", "engine", 'an engine goal (kind = "engine")') from exc

__all__ = ["EngineRunResult", "auto_threads", "own_engines", "run_engine_goal",
           "same_under_traffic"]

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class EngineRunResult:
    run_id: str
    default_id: str
    champion_id: str
    champion_settings: dict[str, Any]
    evaluations: int
    gain: Estimate | None            # the champion's metric over the default's
    default_metric: float
    champion_metric: float


class _Budget:
    def __init__(self, seconds: float, started: float):
        self.end = started + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def run_engine_goal(goal: EngineGoal, store: Store, workdir: Path, log: Log,
                    started: float | None = None, resume: str | None = None,
                    use_lessons: bool = True) -> EngineRunResult:
    """Search engine recipes for ``goal`` within its budget, counted from ``started``
    (``time.monotonic()``; now by default); ``resume`` continues that stopped run.
    With ``use_lessons``, earlier engine runs' lessons and champions start the search."""
    budget = _Budget(goal.budget_s, time.monotonic() if started is None else started)
    from swarmfab.swarm.hosts import host_record

    engine = get_engine(goal.engine)
    missing = engine.unavailable(goal)
    if missing:
        raise EngineError(missing)
    model_dir = goal.model_dir(workdir / "checkpoints")
    refused = engine.unservable(model_dir, goal)
    if refused:
        raise EngineError(refused)
    host = host_record(goal.threads, "c")
    space = engine.space(SpaceContext(goal, model_dir, host, store if use_lessons else None))
    label = goal.run_label(parameter_count(model_dir))
    context = LessonContext.of("engine", host, [label])
    lessons, recalled = own_engines(space, store.lessons_for(context), store.recall(context)) \
        if use_lessons else ((), [])
    if resume is None:
        run_id = store.start_run("engine", goal.model_dump(mode="json", by_alias=True), host)
    else:
        run_id = store.run(resume).id
        store.reopen_run(run_id)
    workdir = workdir / "engine-runs" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"{'resuming ' if resume else ''}engine run {run_id}: {engine.name} serving "
        f"{model_dir}, traffic "
        f"{goal.traffic.label()}, metric {goal.metric}, budget {goal.budget_s:.0f} s")
    if lessons or recalled:
        helpful = sum(lesson.outcome == "helps" for lesson in lessons)
        log(f"{len(lessons)} lesson(s) from earlier engine runs ({helpful} helpful moves), "
            f"{len(recalled)} champion recipe(s) recalled; --no-lessons to ignore them")
    default = space.instantiate(space.default(), threads=goal.threads, agent="default",
                                rationale="the engine's default settings")
    search = _Search(goal, engine, store, run_id, model_dir, workdir, budget, log, label)
    try:
        result = search.run(default, space, lessons, recalled)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", {"evaluations": search.evaluations})
        log(f"interrupted: every verdict so far is recorded; continue with "
            f"`swarmfab resume {run_id}`")
        raise
    except BaseException:
        store.finish_run(run_id, "failed", {"evaluations": search.evaluations})
        raise
    finally:
        search.close()
    store.finish_run(run_id, "finished", {
        "champion": result.champion_id, "default": result.default_id,
        "evaluations": result.evaluations, "metric": goal.metric,
        "gain": None if result.gain is None else [result.gain.median, result.gain.low,
                                                  result.gain.high],
        "default_metric": result.default_metric, "champion_metric": result.champion_metric})
    return result


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One evaluation: its verdict and, when the candidate was measured, its running
    engine and the load rounds beside the incumbent."""

    verdict: Verdict
    process: EngineProcess | None = None
    pair: Comparison | None = None


class _Search:
    def __init__(self, goal: EngineGoal, engine: EngineAdapter, store: Store, run_id: str,
                 model_dir: Path, workdir: Path, budget: _Budget, log: Log, label: str):
        self.goal, self.store, self.run_id, self.label = goal, store, run_id, label
        self.engine = engine
        self.model_dir, self.workdir, self.budget, self.log = model_dir, workdir, budget, log
        self.evaluations = 0
        self.incumbent: EngineProcess | None = None
        self.reference_scores: list[Scores] | None = None  # the default's, teacher-forced
        self.default_dtype: Any = None
        # every load run's prompts new to every server (see evaluate.compare): one stream
        # of seeds for the run; a resumed run's servers start with empty caches
        self.seeds = itertools.count(goal.seed + 1)
        self.load_s = 0.0  # one load run of the goal's traffic, measured on the default
        self.eval_s = 0.0  # the latest measured evaluation: whether another still fits
        self.closing_s = 0.0  # what the closing comparison needs at least
        # the champion's crowning comparison, when it was crowned against the default:
        # itself a side-by-side measurement of the two (see _closing)
        self.crowned_over_default: Comparison | None = None

    def close(self) -> None:
        if self.incumbent is not None:
            self.incumbent.stop()

    def _process(self, candidate: Candidate, log: str = "engine.log") -> EngineProcess:
        directory = self.workdir / candidate.id
        directory.mkdir(exist_ok=True)
        recipe = directory / candidate.entry
        recipe.write_text(candidate.sources[candidate.entry])
        return EngineProcess(self.model_dir, recipe, directory / log, engine=self.engine,
                             goal=self.goal)

    def run(self, default: Candidate, space: Any, lessons: tuple[Lesson, ...] = (),
            recalled: Sequence[Recalled] = ()) -> EngineRunResult:
        goal = self.goal
        judged = [(self.store.candidate(row.candidate_id), verdict)
                  for row, verdict in self.store.verdicts(self.run_id)]
        self.default_dtype = default.knobs.get("dtype")
        started = time.monotonic()
        self.incumbent = self._process(default).start(
            min(goal.startup_timeout_s, max(1.0, self.budget.left())))
        startup_s = time.monotonic() - started
        prompts = verify_prompts(goal, _vocab(self.model_dir))
        reference = greedy_tokens(self.incumbent.url, prompts, goal.verify_tokens)
        if self.engine.scores_numerics and len(space.knob("dtype").values) > 1:
            # the accuracy gate's reference scores
            self.reference_scores = score_continuations(self.incumbent.url, prompts,
                                                        reference)
        measured = time.monotonic()
        warm_up(self.incumbent.url, goal)
        resumed = any(candidate.id == default.id for candidate, _ in judged)
        # resumed: one load run says what a measurement costs now
        rounds = 1 if resumed else goal.min_rounds
        baseline = [load_once(self.incumbent.url, goal, next(self.seeds))
                    for _ in range(rounds)]
        load_s = self.load_s = (time.monotonic() - measured) / rounds
        objective = objective_check(baseline, goal)
        if not resumed:
            self.store.record(self.run_id, default, Verdict(
                default.id, Status.ACCEPTED, f"the reference engine; {objective.detail}",
                (CheckResult("prompts", "reference", True, "the reference tokens"),
                 objective), elapsed_s=time.monotonic() - started))
            self.store.set_champion(self.run_id, default.id)
            self._measured(default.id, "default", baseline)
        self.log(f"default: {goal.metric} {_median(baseline):.3g}; {objective.detail}")
        champion = self._recorded_champion(default)
        # what a comparison costs at least: a start and min_rounds load runs of each side,
        # and the offered-load runs after it
        closing_s = self.closing_s = startup_s + 2 * goal.min_rounds * load_s \
            + self._offered_s()
        self.eval_s = closing_s + (measured - started - startup_s)  # + verification

        def reserve() -> float:
            """Time kept for the closing comparison: none while the default is champion,
            since a crown over the default is that comparison already."""
            return 0.0 if champion.id == default.id else closing_s
        evaluated = {default.id, *(candidate.id for candidate, _ in judged)}
        recent = [verdict for _, verdict in judged if verdict.candidate_id != default.id]
        if recent:
            self.log(f"{len(recent)} candidate(s) already judged in this run; "
                     f"champion {champion.id}")
        # earlier champions first, then the space's starting points, then the domain
        # agents, lessons as their priors
        agents = [*([RecallAgent(recalled)] if recalled else []),
                  *([StartingPointsAgent()] if space.starting else []),
                  *bandit_agents(space.knobs)]
        # a resumed run draws afresh rather than replaying the proposals it has judged
        rng = random.Random(f"{goal.seed}/{len(recent)}" if recent else goal.seed)
        turn = idle = 0
        while idle < len(agents) and self.budget.left() > self.eval_s + reserve():
            if goal.max_evaluations is not None and self.evaluations >= goal.max_evaluations:
                break
            agent = agents[turn % len(agents)]
            name = agent.id.removeprefix("builtin-")
            turn += 1
            context = Context(goal=goal, space=space, champion=champion,
                              evaluated=frozenset(evaluated), recent=tuple(recent),
                              lessons=lessons, rng=rng)
            proposals = agent.propose(context, 1)
            if proposals and self.engine.same_under_traffic(proposals[0].knobs,
                                                            champion.knobs, goal,
                                                            self.model_dir):
                evaluated.add(proposals[0].id)  # it could only measure noise
                self.log(f"{name}: {_knobs(_changed(proposals[0], champion))} "
                         "cannot change this traffic's serving; not measured")
                proposals = []
            if not proposals:
                idle += 1
                continue
            idle = 0
            candidate = proposals[0]
            evaluated.add(candidate.id)
            outcome = self._evaluate(candidate, champion.id, prompts, reference,
                                     reserve())
            verdict, process = outcome.verdict, outcome.process
            self.evaluations += 1
            recent.append(verdict)
            self.store.record(self.run_id, candidate, verdict)
            decision = judge(verdict)
            changed = _changed(candidate, champion)
            self.log(f"[{self.evaluations}] {name}: {_knobs(changed)} -> "
                     f"{verdict.status.value}: {verdict.reason}"
                     f"{'  CROWNED' if decision.promote else ''}")
            if decision.promote and process is not None:
                assert self.incumbent is not None
                self.incumbent.stop()
                self.crowned_over_default = outcome.pair if champion.id == default.id \
                    else None
                self.incumbent, champion = process, candidate
                self.store.set_champion(self.run_id, candidate.id)
                self.store.record_event(self.run_id, "champion",
                                        f"{candidate.id}: {_knobs(changed)}; {decision.reason}")
            elif process is not None:
                process.stop()
        if self.evaluations == 0 and self.budget.left() <= self.eval_s:
            self.log(f"no evaluation fits the {self.budget.left():.0f} s left: one needs "
                     f"about {self.eval_s:.0f} s ({goal.min_rounds} rounds of two "
                     f"{load_s:.0f} s load runs, a {startup_s:.0f} s start, the "
                     "verification); raise the budget or lighten the traffic")
        return self._closing(default, champion)

    def _offered_s(self) -> float:
        """About how long the offered-load runs take: two per load (default, champion)."""
        return 2 * sum(self._load_s(load) for load in self.goal.offered_loads)

    def _load_s(self, load: float) -> float:
        """About how long one load run at an offered ``load`` takes."""
        traffic = self.goal.traffic
        goal_load = (traffic.concurrency if math.isinf(traffic.request_rate)
                     else traffic.request_rate)
        return self.load_s * max(1.0, float(goal_load or 1) / load)

    def _offered(self, engines: dict[str, str]) -> None:
        """Each engine (candidate id -> URL) serves one load run at each of the goal's
        offered loads, alternating, while the budget lasts (``offered`` events)."""
        loads = self.goal.offered_loads
        for load in loads:
            need = len(engines) * self._load_s(load)
            if self.budget.left() < need:
                self.log(f"offered loads from {load:g} on skipped: {need:.0f} s needed, "
                         f"{max(0.0, self.budget.left()):.0f} s left")
                return
            goal = self.goal.at_load(load)
            seed = next(self.seeds)  # the same prompts for each engine, new to both
            for candidate_id, url in engines.items():
                try:
                    rounds = [load_once(url, goal, seed)]
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    self.log(f"offered load {load:g} failed on {candidate_id}: {exc}")
                    return
                self.store.record_event(self.run_id, "offered", json.dumps(
                    {**measured(candidate_id, "offered", rounds), "load": load}))
        if loads:
            self.log(f"goodput at offered loads {', '.join(f'{x:g}' for x in loads)}: "
                     "recorded for the report")

    def _measured(self, candidate_id: str, role: str, rounds: list[Any]) -> None:
        if rounds:
            self.store.record_event(self.run_id, "measured",
                                    json.dumps(measured(candidate_id, role, rounds)))

    def _recorded_champion(self, default: Candidate) -> Candidate:
        """The run's recorded champion, made the incumbent (a resumed run's crowned
        recipe starts again; if it no longer starts, the default stays incumbent)."""
        champion_id = self.store.run(self.run_id).champion_id
        if champion_id is None or champion_id == default.id:
            return default
        champion = self.store.candidate(champion_id)
        process = self._process(champion, "resumed.log")
        try:
            process.start(min(self.goal.startup_timeout_s, max(1.0, self.budget.left())))
        except EngineStartError as exc:
            self.log(f"the recorded champion {champion.id} no longer starts ({exc}); "
                     "the default settings are the incumbent")
            self.store.set_champion(self.run_id, default.id)
            self.store.record_event(self.run_id, "champion",
                                    f"{default.id}: {champion.id} no longer starts")
            return default
        assert self.incumbent is not None
        self.incumbent.stop()
        self.incumbent = process
        warm_up(process.url, self.goal)
        return champion

    def _evaluate(self, candidate: Candidate, incumbent_id: str, prompts: list[list[int]],
                  reference: list[list[int]], closing_s: float) -> _Outcome:
        """The verdict; when the candidate was measured, its running process and the
        load rounds beside the incumbent."""
        started = time.monotonic()
        refused = self.engine.refuses(candidate.knobs, self.goal)
        if refused:  # judged without a start
            return _Outcome(Verdict(candidate.id, Status.REJECTED, f"refused: {refused}",
                                    elapsed_s=time.monotonic() - started))
        process = self._process(candidate)

        def failed(status: Status, reason: str, log: str = "") -> _Outcome:
            process.stop()
            return _Outcome(Verdict(candidate.id, status, reason,
                                    elapsed_s=time.monotonic() - started,
                                    diagnostics=(log,) if log else ()))

        try:
            process.start(min(self.goal.startup_timeout_s,
                              max(1.0, self.budget.left() - closing_s)))
        except EngineStartError as exc:
            return failed(Status.TIMED_OUT if exc.timed_out else Status.CRASHED, str(exc),
                          exc.log)
        try:
            checks, wrong = self._verify(candidate, process.url, prompts, reference)
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            return failed(Status.CRASHED, f"verification requests failed: {exc}",
                          process.log_tail())
        if wrong:
            process.stop()
            return _Outcome(Verdict(candidate.id, Status.REJECTED, wrong, tuple(checks),
                                    elapsed_s=time.monotonic() - started))
        assert self.incumbent is not None
        try:
            warm_up(process.url, self.goal)
            until = time.monotonic() + max(0.0, self.budget.left() - closing_s)
            pair = compare(self.incumbent.url, process.url, self.goal, until, self.seeds)
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            status = Status.CRASHED if process.ended_within(2.0) else Status.REJECTED
            return failed(status, f"load failed: {exc}", process.log_tail())
        self.eval_s = time.monotonic() - started  # the latest: rounds vary with noise
        self._measured(candidate.id, "candidate", pair.candidate)
        verdict = comparison_verdict(candidate.id, incumbent_id, pair, checks, self.goal,
                                     time.monotonic() - started, self.label)
        return _Outcome(verdict, process, pair)

    def _verify(self, candidate: Candidate, url: str, prompts: list[list[int]],
                reference: list[list[int]]) -> tuple[list[CheckResult], str]:
        """The checks, and why they reject the candidate ("" if they do not): the
        reference's greedy tokens, or the accuracy gate where the dtype differs."""
        goal = self.goal
        if candidate.knobs.get("dtype") != self.default_dtype \
                and self.reference_scores is not None:
            checks = numerics_checks(reference, self.reference_scores,
                                     score_continuations(url, prompts, reference),
                                     goal.min_top1_agreement, goal.max_logprob_error)
            gate = checks[-1]
            return checks, "" if gate.passed else f"fails the accuracy gate: {gate.detail}"
        checks = verify_tokens(reference, greedy_tokens(url, prompts, goal.verify_tokens))
        wrong = [c for c in checks if not c.passed]
        return checks, "" if not wrong else (
            f"changes tokens on {len(wrong)}/{len(checks)} prompts "
            f"({wrong[0].case}: {wrong[0].detail})")

    def _closing(self, default: Candidate, champion: Candidate) -> EngineRunResult:
        """Default and champion side by side once more: the run's gain. Where no time is
        left for that and the champion was crowned over the default itself, its crowning
        comparison is the side-by-side measurement reported."""
        assert self.incumbent is not None
        if champion.id == default.id:
            self.log("no recipe beat the default settings")
            self._offered({default.id: self.incumbent.url})
            return EngineRunResult(self.run_id, default.id, champion.id, dict(champion.knobs),
                                   self.evaluations, None, 0.0, 0.0)
        crowning = self.crowned_over_default
        if crowning is not None and self.budget.left() < self.closing_s:
            pair, source = crowning, "crowning"
            self.log("no time left for a closing comparison: the gain is the champion's "
                     "crowning comparison with the default")
        else:
            source = "closing"
            with self._process(default, "closing.log") as reference:  # keep the first log
                reference.start(min(self.goal.startup_timeout_s,
                                    max(1.0, self.budget.left())))
                warm_up(reference.url, self.goal)
                left = self.budget.left() - 5 - self._offered_s()
                pair = compare(reference.url, self.incumbent.url, self.goal,
                               time.monotonic() + max(0.0, left), self.seeds)
                self._offered({default.id: reference.url, champion.id: self.incumbent.url})
        gain = pair.ratio().inverted()
        default_metric, champion_metric = _median(pair.incumbent), _median(pair.candidate)
        self._measured(default.id, "closing-default", pair.incumbent)
        self._measured(champion.id, "closing-champion", pair.candidate)
        self.store.record_event(self.run_id, "closing", json.dumps({
            "gain": [gain.median, gain.low, gain.high], "rounds": len(pair.candidate),
            "default": default_metric, "champion": champion_metric, "source": source}))
        self.log(f"champion {champion.id} against the default, side by side: "
                 f"{self.goal.metric} {default_metric:.3g} -> {champion_metric:.3g}, "
                 f"x{gain.median:.2f} [{gain.low:.2f}, {gain.high:.2f}]")
        return EngineRunResult(self.run_id, default.id, champion.id, dict(champion.knobs),
                               self.evaluations, gain, default_metric, champion_metric)


def own_engines(space: Any, lessons: Sequence[Lesson], recalled: Sequence[Recalled]
                ) -> tuple[tuple[Lesson, ...], list[Recalled]]:
    """The lessons and recalled champions of ``space``'s engine: every engine's runs
    share the store's "engine" workload, and another engine's (knobs this space lacks)
    would propose settings of another program."""
    knobs = {knob.name for knob in space.knobs}
    return (tuple(lesson for lesson in lessons if lesson.knob in knobs),
            [champion for champion in recalled if set(champion.knobs) <= knobs])


def _changed(candidate: Candidate, champion: Candidate) -> dict[str, Any]:
    return {k: v for k, v in candidate.knobs.items() if champion.knobs.get(k) != v}


def _vocab(model_dir: Path) -> int:
    """The checkpoint's vocabulary (config.json's vocab_size)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        return int(config.get("vocab_size") or config.get("text_config", {})["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"{model_dir}/config.json names no vocab_size: {exc}") from exc


def _median(rounds: list[Any]) -> float:
    return statistics.median(r.metric for r in rounds) if rounds else 0.0


def _knobs(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(setting.items())) or "(no change)"
