"""What the report shows of an engine run: each measured setting, the Pareto front of
throughput against p99 latency, and the closing default-against-champion measurement.

The engine factory records every load measurement as a ``measured`` event (medians over
its rounds: the goal's metric, output tokens/s, p99 TTFT and TPOT) and the side-by-side
gain as a ``closing`` event; this module reads them back. Search figures of different
settings come from different moments of a shared host, so the Pareto front is a map of
the space, not a ranking: the gain that counts is the closing one, measured in
alternating rounds. When the goal names offered loads, the default and the champion
each served one load run at every one of them after that (``offered`` events): the
goodput-against-offered-load curves.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from swarmfab.errors import SwarmfabError
from swarmfab.knowledge import Store
from swarmfab.records import Estimate
from swarmfab.serving.goal import EngineGoal, validate_engine_goal

__all__ = ["ServingPoint", "ServingView", "load_serving_view", "pareto_front"]


@dataclass(frozen=True, slots=True)
class ServingPoint:
    """One engine setting's figures in one measurement (medians over its load rounds)."""

    candidate_id: str
    role: str  # default, candidate, closing-default, closing-champion
    change: str  # its knobs that differ from the default's ("" for the default)
    metric: float
    output_throughput: float  # tokens/s
    p99_ttft_ms: float
    p99_tpot_ms: float
    rounds: int
    within: bool  # the objective met
    pareto: bool = False  # no other searched setting serves more at a lower p99 TPOT


@dataclass(frozen=True, slots=True)
class ServingView:
    metric: str
    objective: dict[str, float | None]
    traffic: str
    points: list[ServingPoint]  # the search: the default, then each measured candidate
    closing: tuple[ServingPoint, ServingPoint] | None  # default, champion side by side
    gain: Estimate | None  # the champion's metric over the default's, in the closing rounds
    # after the closing comparison: candidate id -> (offered load, figures), load order
    offered: dict[str, list[tuple[float, ServingPoint]]] = field(default_factory=dict)
    open_loop: bool = False  # offered loads are request rates (else concurrencies)

    @property
    def front(self) -> list[ServingPoint]:
        return sorted((p for p in self.points if p.pareto), key=lambda p: p.p99_tpot_ms)


def pareto_front(points: list[ServingPoint]) -> set[int]:
    """Indices of the points no other point dominates: at least as much output
    throughput at no more p99 TPOT, and strictly better in one of the two."""
    front = set()
    for i, p in enumerate(points):
        if not any(q.output_throughput >= p.output_throughput and
                   q.p99_tpot_ms <= p.p99_tpot_ms and
                   (q.output_throughput > p.output_throughput or
                    q.p99_tpot_ms < p.p99_tpot_ms)
                   for j, q in enumerate(points) if j != i):
            front.add(i)
    return front


def load_serving_view(store: Store, recorded_goal: dict[str, Any],
                      events: list[tuple[str, str, float]]) -> ServingView:
    """The engine run's measurements, read from its events."""
    goal = validate_engine_goal(recorded_goal, "the run's recorded goal")
    knobs: dict[str, dict[str, Any]] = {}

    def change(candidate_id: str, default_id: str | None) -> str:
        for key in (candidate_id, default_id):
            if key is not None and key not in knobs:
                try:
                    knobs[key] = store.candidate(key).knobs
                except SwarmfabError:
                    knobs[key] = {}
        if default_id is None or candidate_id == default_id:
            return ""
        base = knobs[default_id]
        return ", ".join(f"{k}={v}" for k, v in sorted(knobs[candidate_id].items())
                         if base.get(k) != v)

    recorded = [json.loads(detail) for kind, detail, _ in events if kind == "measured"]
    default_id = next((m["candidate"] for m in recorded if m["role"] == "default"), None)
    points = [_point(m, change(m["candidate"], default_id), goal) for m in recorded]
    search = [p for p in points if not p.role.startswith("closing")]
    front = pareto_front(search)
    search = [replace(p, pareto=i in front) for i, p in enumerate(search)]
    closing_points = {p.role: p for p in points if p.role.startswith("closing")}
    closing = None
    if {"closing-default", "closing-champion"} <= closing_points.keys():
        closing = (closing_points["closing-default"], closing_points["closing-champion"])
    gain = next((Estimate(*json.loads(detail)["gain"]) for kind, detail, _ in events
                 if kind == "closing"), None)
    offered: dict[str, list[tuple[float, ServingPoint]]] = {}
    for kind, detail, _ in events:
        if kind == "offered":
            m = json.loads(detail)
            offered.setdefault(m["candidate"], []).append(
                (float(m["load"]), _point(m, change(m["candidate"], default_id), goal)))
    return ServingView(goal.metric, goal.objective.model_dump(),
                       f"{goal.traffic.label()}, {goal.traffic.num_prompts} prompts",
                       search, closing, gain,
                       {k: sorted(v, key=lambda x: x[0]) for k, v in offered.items()},
                       math.isfinite(goal.traffic.request_rate))


def _point(m: dict[str, Any], change: str, goal: EngineGoal) -> ServingPoint:
    """A ``measured``/``offered`` event's figures; the objective judged as the factory
    judges it (:func:`~swarmfab.serving.evaluate.objective_check` on the medians)."""
    from swarmfab.serving.evaluate import LoadRound, objective_check

    medians = LoadRound(m["metric"], m["p99_ttft_ms"], m["p99_tpot_ms"],
                        m["output_throughput"], m["request_goodput"], m["failed"])
    return ServingPoint(m["candidate"], m["role"], change, m["metric"],
                        m["output_throughput"], m["p99_ttft_ms"], m["p99_tpot_ms"],
                        m["rounds"], objective_check([medians], goal).passed)
