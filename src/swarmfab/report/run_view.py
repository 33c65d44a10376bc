"""Everything the HTML report and the dashboard show about one run, read from the store.

One read-only pass over the store gives a :class:`RunView`: the evaluations in order with
each accepted candidate's speed relative to the fastest baseline, the champion's lineage
with what each step changed and gained, events, corpus growth, host peaks and lessons.
Charts and pages are drawn from this view only, so both displays show the same figures.

Speeds relative to the baselines are compounded the way the run does it: a candidate is
timed against the incumbent of its time, so its speed over the baselines is the
incumbent's own speed times the measured ratio (the geometric mean over target shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from swarmfab.errors import SwarmfabError
from swarmfab.knowledge import Store
from swarmfab.knowledge.generations import Generation, Generations
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, Estimate, ShapeTiming, Status
from swarmfab.report.adequacy import measurement_key
from swarmfab.report.serving_view import ServingView, load_serving_view

__all__ = [
    "Evaluation",
    "LineageStep",
    "RunView",
    "ShapeCost",
    "load_run_view",
    "recorded_lessons",
]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One verdict of the run, in the order it was recorded."""

    number: int
    candidate_id: str
    agent: str
    status: str
    reason: str
    minutes: float  # since the run started
    became_champion: bool
    demoted: str | None
    timings: tuple[ShapeTiming, ...]
    speed: float | None  # over the fastest baseline (geometric mean over shapes); accepted only


@dataclass(frozen=True, slots=True)
class LineageStep:
    """One ancestor of the champion (root first): what it changed and what that gained."""

    candidate_id: str
    agent: str
    rationale: str
    knobs: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]  # knob -> (parent's value, this one's)
    gains: tuple[tuple[str, Estimate], ...]  # per shape: speedup over the incumbent then
    speed: float | None  # over the fastest baseline once crowned; None if never judged here

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.candidate_id, "agent": self.agent, "rationale": self.rationale,
                "knobs": self.knobs, "changed": {k: list(v) for k, v in self.changed.items()},
                "gain_over_incumbent": {shape: [g.median, g.low, g.high]
                                        for shape, g in self.gains},
                "speed_over_baselines": self.speed}


@dataclass(frozen=True, slots=True)
class ShapeCost:
    """A target shape's floating-point operations and compulsory bytes (roofline axes)."""

    label: str
    flops: float
    nbytes: float


@dataclass(frozen=True, slots=True)
class CaseAdded:
    name: str
    origin: str
    minutes: float  # relative to this run's start (negative: before it)
    this_run: bool
    rejected: int = 0  # candidates (of any run) that failed first on it after it was added


@dataclass(slots=True)
class RunView:
    run_id: str
    workload: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    goal: dict[str, Any]
    host: dict[str, Any]
    champion_id: str | None
    summary: dict[str, Any]
    evaluations: list[Evaluation]
    lineage: list[LineageStep]
    events: list[tuple[str, str, float]]  # kind, detail, minutes since start
    builtin_cases: int
    cases: list[CaseAdded]
    peaks: HostPeaks | None
    shape_costs: dict[str, ShapeCost]
    lessons: list[str] = field(default_factory=list)
    generation: Generation | None = None  # where its champion stands after refreshes
    generations: list[str] = field(default_factory=list)  # its champion's line of runs
    serving: ServingView | None = None  # an engine run's load measurements
    # the workload's last mutation-adequacy measurement (`swarmfab corpus adequacy`)
    adequacy: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for evaluation in self.evaluations:
            counts[evaluation.status] = counts.get(evaluation.status, 0) + 1
        return counts

    @property
    def elapsed_minutes(self) -> float:
        end = self.finished_at or datetime.now(UTC)
        return max(0.0, (_aware(end) - _aware(self.started_at)).total_seconds() / 60)


def recorded_lessons(store: Store, run_id: str, workload: str) -> list[str]:
    """Lessons learned that bear on this run: the one place displays read them from.

    The knowledge base records no lessons yet, so there are none to show."""
    return []


def load_run_view(store: Store, run_id: str | None) -> RunView:
    """Read run ``run_id`` (an id, ``latest`` or None for the latest) for display."""
    run = store.run(run_id)
    started = _aware(run.started_at)
    events = [(kind, detail, _minutes(at, started)) for kind, detail, at in
              store.timed_events(run.id)]
    evaluations = _evaluations(store, run.id, started, events)
    rejections = store.case_rejections(run.workload)
    view = RunView(
        run_id=run.id, workload=run.workload, status=run.status, started_at=started,
        finished_at=_aware(run.finished_at) if run.finished_at else None, goal=run.goal,
        host=run.host, champion_id=run.champion_id, summary=run.summary or {},
        evaluations=evaluations, lineage=[], events=events,
        builtin_cases=_builtin_case_count(run.workload),
        cases=[CaseAdded(name, origin, _minutes(at, started), found_by == run.id,
                         rejections.get(name, 0))
               for name, origin, at, found_by in store.case_history(run.workload)],
        peaks=_peaks(store, run.host), shape_costs=_shape_costs(run.goal),
        lessons=recorded_lessons(store, run.id, run.workload),
    )
    if run.champion_id is not None:
        view.lineage = champion_lineage(store, store.candidate(run.champion_id), evaluations)
    if run.workload == "engine":
        view.serving = load_serving_view(store, run.goal, events)
    view.adequacy = store.measurement(measurement_key(run.workload))
    generations = Generations(store)
    view.generation = generations.of(run.id)
    view.generations = generations.lineage(run.id)
    return view


def champion_lineage(store: Store, champion: Candidate,
                     evaluations: list[Evaluation]) -> list[LineageStep]:
    """The champion's first-parent chain, root first, with each step's change and gain."""
    judged = {e.candidate_id: e for e in evaluations}
    chain: list[Candidate] = [champion]
    while chain[-1].parents and len(chain) < 1000:
        try:
            chain.append(store.candidate(chain[-1].parents[0]))
        except SwarmfabError:
            break  # a parent from elsewhere that this store never kept
    chain.reverse()
    steps = []
    for parent, child in zip([None, *chain], chain, strict=False):
        before = parent.knobs if parent is not None else {}
        changed = {k: (before.get(k), v) for k, v in child.knobs.items() if before.get(k) != v}
        seen = judged.get(child.id)
        gains = tuple((t.shape, t.ratio.inverted()) for t in seen.timings) if seen else ()
        steps.append(LineageStep(child.id, child.agent, child.rationale, child.knobs, changed,
                                 gains,
                                 seen.speed if seen else None))
    return steps


def _evaluations(store: Store, run_id: str, started: datetime,
                 events: list[tuple[str, str, float]]) -> list[Evaluation]:
    demotions = sorted(minutes for kind, _, minutes in events if kind == "demoted")
    gain, result = 1.0, []
    for number, (row, verdict) in enumerate(store.verdicts(run_id), start=1):
        minutes = _minutes(row.created_at, started)
        while demotions and demotions[0] <= minutes:  # the run fell back to the baselines
            demotions.pop(0)
            gain = 1.0
        speed = None
        if verdict.status is Status.ACCEPTED and verdict.timings:
            speed = gain * _geometric_mean([t.ratio.inverted().median for t in verdict.timings])
            if row.became_champion:
                gain = speed
        result.append(Evaluation(number, row.candidate_id, row.agent, row.status, row.reason,
                                 minutes, row.became_champion, row.demoted, verdict.timings,
                                 speed))
    return result


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _aware(moment: datetime) -> datetime:
    """SQLite hands datetimes back without a zone; the store writes them in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _minutes(moment: datetime, started: datetime) -> float:
    return (_aware(moment) - started).total_seconds() / 60


def _builtin_case_count(workload: str) -> int:
    from swarmfab.workloads import get_workload

    try:
        return len(get_workload(workload).validation_cases())
    except SwarmfabError:
        return 0  # a user workload whose file is gone: its stored cases still show


def _peaks(store: Store, host: dict[str, Any]) -> HostPeaks | None:
    """The stored peaks of the run's host: same ISA and thread count (fingerprint tail)."""
    tail = f"| {host.get('isa', '')} | {host.get('threads')} threads"
    matches = [p for p in store.known_host_peaks() if p.fingerprint.endswith(tail)]
    return max(matches, key=lambda p: p.flops_per_s) if matches else None


def _shape_costs(goal: dict[str, Any]) -> dict[str, ShapeCost]:
    """FLOPs and bytes of the goal's target shapes, by label; empty when unknown."""
    from swarmfab.goal import Goal
    from swarmfab.workloads import compulsory_bytes, get_workload

    try:
        parsed = Goal.model_validate(goal)
        workload = get_workload(parsed.workload)
        shapes = parsed.target_shapes()
    except (SwarmfabError, ValueError):
        return {}
    costs = {}
    for shape in shapes:
        flops, nbytes = workload.flops(shape), compulsory_bytes(workload, shape, parsed.dtype)
        if flops and nbytes:
            costs[shape.label] = ShapeCost(shape.label, flops, nbytes)
    return costs
