"""Keep champions current when the host or the software changes (``swarmfab refresh``).

A champion was verified and timed on one host, with one compiler, torch and corpus. For
every champion in the store that no later generation has succeeded, a refresh:

1. compares the host its run recorded with this one: the CPU, its vector ISA, the
   compiler, torch and swarmfab versions, and whether the goal's threads fit here;
2. re-verifies it on the current corpus (built-in cases plus every stored
   counterexample, which may have grown since it was crowned);
3. re-times it side by side against the baseline it was quoted against, per shape, and
   compares the speedup with the recorded one (stale when the whole confidence interval
   lies below :data:`SLOWER_THAN_RECORDED` of the recorded interval's lower end, or
   below 1);
4. records the check (``RefreshRow``); a stale champion then gets a short new run of the
   same goal, started from what the store knows (recall and lessons), which is recorded
   as its successor.

The wall time of the whole is the caller's budget: checks run while it lasts, and what
is left is shared by the successors. Nothing recorded is changed or removed: a stale
champion keeps its run, verdict and evidence, and the successor link is added beside.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from swarmfab.backends import cuda_device_available
from swarmfab.errors import SwarmfabError
from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.goal import Goal
from swarmfab.knowledge import RunRow, Store
from swarmfab.knowledge.generations import Generations
from swarmfab.measure import CONFIRMATION
from swarmfab.records import Status
from swarmfab.swarm.hosts import host_record

__all__ = ["MIN_SUCCESSOR_S", "SLOWER_THAN_RECORDED", "Check", "environment_changes",
           "refresh_champions", "slower_than_recorded", "to_check"]

SLOWER_THAN_RECORDED = 0.9  # a speedup whose CI lies below 90% of the recorded CI is stale
MIN_SUCCESSOR_S = 30.0  # a run needs this much to set up and judge a few candidates
RETIME_S = 4.0  # timing per shape: a check, not the closing table
# what the champion's code or speed depends on, beside the vector ISA and the thread count
_VERSIONS = (("cpu", "the CPU"), ("compiler", "the compiler"), ("torch", "torch"),
             ("nvcc", "nvcc"), ("triton", "Triton"), ("fla", "fla"))

_MAIN_FEATURES = ("amx_tile", "avx512f", "avx512_bf16", "avx512_fp16", "avx512bw", "avx512vl",
                  "avx2", "fma", "avx", "neon", "sve")

MakeEvaluator = Callable[[Goal], Evaluator]
# (goal, seconds) -> the successor run's id and its champion's id (None: no candidate
# beat the baselines there)
StartSuccessor = Callable[[Goal, float], tuple[str, str | None]]


@dataclass(frozen=True, slots=True)
class Check:
    """What a refresh found about one champion."""

    run_id: str
    workload: str
    candidate_id: str
    state: str  # "current" or "stale"
    reasons: tuple[str, ...]
    verifies: bool | None  # None: not re-verified (its goal no longer loads)
    figures: tuple[dict[str, Any], ...]  # per shape: baseline, recorded and now
    refresh_id: int
    goal: Goal | None = None
    successor: str | None = None
    successor_champion: str | None = None
    note: str = ""  # why there is no successor, where there is none

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("goal")
        return data


def to_check(store: Store, workload: str | None = None) -> list[RunRow]:
    """Every run with a champion that no later generation succeeded, oldest first."""
    generations = Generations(store)
    return [run for run in store.runs() if run.champion_id is not None
            and (workload is None or run.workload == workload)
            and not generations.succeeded(run.id)]


def environment_changes(recorded: Mapping[str, Any], here: Mapping[str, Any],
                        cores: int | None = None) -> list[str]:
    """Why a champion recorded on ``recorded`` may not hold on ``here``; a fact its run
    did not record is not a change."""
    reasons = []
    was, now = str(recorded.get("isa", "")).split(), str(here.get("isa", "")).split()
    if was and now:
        if was[0] != now[0]:
            reasons.append(f"architecture {was[0]} -> {now[0]}")
        lacks, adds = set(was[1:]) - set(now[1:]), set(now[1:]) - set(was[1:])
        if lacks:
            reasons.append(f"ISA: this host lacks {_features(lacks)}, which the champion's "
                           "host had")
        if adds:
            reasons.append(f"ISA: this host adds {_features(adds)}; the champion was tuned "
                           "without them")
    for key, name in _VERSIONS:
        before, after = recorded.get(key), here.get(key)
        if before is not None and after is not None and before != after:
            reasons.append(f"{name}: {before} -> {after}")
    threads = int(recorded.get("threads", 1))
    cores = cores if cores is not None else os.cpu_count() or 1
    if threads > cores:
        reasons.append(f"the goal asks for {threads} threads; this host has {cores} cores")
    return reasons


def _features(flags: set[str], shown: int = 4) -> str:
    """The widest vector extensions first (avx512f before avx512_vnni), then a count."""
    ordered = sorted(flags, key=lambda f: (f not in _MAIN_FEATURES, _MAIN_FEATURES.index(f)
                                           if f in _MAIN_FEATURES else 0, f))
    more = len(ordered) - shown
    return ", ".join(ordered[:shown]) + (f" and {more} more" if more > 0 else "")


def refresh_champions(store: Store, runs: list[RunRow], deadline: float,
                      make_evaluator: MakeEvaluator, start_successor: StartSuccessor | None,
                      log: Callable[[str], None]) -> list[Check]:
    """Check ``runs``' champions while ``deadline`` (``time.monotonic()``) allows, then
    give the stale ones successors with what is left (none when ``start_successor`` is
    None); champions not reached are logged."""
    checks: list[Check] = []
    for number, run in enumerate(runs):
        if time.monotonic() >= deadline:
            log(f"the budget is spent: {len(runs) - number} champion(s) not checked "
                "(give refresh a larger --budget)")
            break
        log(f"checking run {run.id} ({run.workload}), champion {run.champion_id}")
        checks.append(_check(store, run, make_evaluator))
        log(f"  {checks[-1].state}" + "".join(f"\n  - {r}" for r in checks[-1].reasons))
    stale = [index for index, check in enumerate(checks) if check.state == "stale"]
    for order, index in enumerate(stale):
        check = checks[index]
        share = (deadline - time.monotonic()) / (len(stale) - order)
        if check.goal is None:
            note = "no successor: its goal cannot run here"
        elif start_successor is None:
            note = "no successor started (--check-only)"
        elif share < MIN_SUCCESSOR_S:
            note = (f"no successor: {max(share, 0):.0f} s of the budget left for it, a run "
                    f"needs at least {MIN_SUCCESSOR_S:.0f} s (give refresh a larger --budget)")
        else:
            log(f"run {check.run_id}: a successor gets {share:.0f} s")
            try:
                successor, champion = start_successor(check.goal, share)
            except SwarmfabError as exc:
                note = f"no successor: its run failed: {exc}"
            else:
                store.set_successor(check.refresh_id, successor)
                checks[index] = dataclasses.replace(check, successor=successor,
                                                    successor_champion=champion)
                continue
        log(f"run {check.run_id}: {note}")
        checks[index] = dataclasses.replace(check, note=note)
    return checks


def _check(store: Store, run: RunRow, make_evaluator: MakeEvaluator) -> Check:
    assert run.champion_id is not None
    candidate = store.candidate(run.champion_id)
    reasons: list[str] = []
    verifies, figures, goal = None, [], None
    try:
        goal = Goal.model_validate(run.goal)
        evaluator = make_evaluator(goal)
    except (ValidationError, SwarmfabError) as exc:
        reasons.append(f"its goal no longer loads here: {exc}".splitlines()[0])
        host = host_record(int(run.host.get("threads", 1)), candidate.backend)
    else:
        host = host_record(goal.threads, candidate.backend)
        reasons += environment_changes(run.host, host)
        if goal.device == "cuda" and not cuda_device_available():
            reasons.append("its goal runs on a CUDA device; this host has none")
            goal = None  # neither checked nor succeeded here
    if goal is not None:
        verdict = evaluator.verify(candidate)
        if verdict.status is Status.ACCEPTED:  # and the battery, as before a crowning
            verdict = evaluator.verify_battery(candidate, verdict)
        verifies = verdict.status is Status.ACCEPTED
        if not verifies:
            failed = verdict.failed_check
            on = f" (case {failed.case})" if failed else ""
            reasons.append(f"no longer verifies on the current corpus{on}: {verdict.reason}")
        else:
            figures = _retime(evaluator, candidate, run.summary or {}, reasons)
    state = "stale" if reasons else "current"
    refresh_id = store.record_refresh(run.id, candidate.id, state, reasons, host, figures,
                                      verifies)
    return Check(run.id, run.workload, candidate.id, state, tuple(reasons), verifies,
                 tuple(figures), refresh_id, goal)


def _retime(evaluator: Evaluator, candidate: Any, summary: Mapping[str, Any],
            reasons: list[str]) -> list[dict[str, Any]]:
    """The champion against the baseline each shape was quoted against, side by side;
    a reason is added where it is slower than recorded."""
    recorded = {entry["shape"]: entry for entry in summary.get("shapes", [])}
    known = evaluator.workload.baselines()
    default = evaluator.workload.default_baselines(evaluator.device)
    quoted = {case.shape.label: recorded.get(case.shape.label, {}).get("fastest_baseline")
              for case in evaluator.targets}
    missing = sorted({name for name in quoted.values() if name and name not in known})
    if missing:
        reasons.append(f"baseline {', '.join(missing)} no longer exists here")
    names = sorted({name for name in quoted.values() if name in known} or set(default))
    policy = dataclasses.replace(CONFIRMATION, max_seconds=RETIME_S)
    try:
        tables = evaluator.side_by_side(
            [Implementation("champion", artifact=evaluator.build(candidate)),
             *(Implementation(name, baseline=name) for name in names)], policy)
    except SwarmfabError as exc:
        reasons.append(f"could not be re-timed: {exc}")
        return []
    figures = []
    for table in tables:
        baselines = {n: e for n, e in table.ratio_to_reference.items() if n != "champion"}
        name = quoted.get(table.shape) or max(baselines, key=lambda n: baselines[n].median)
        if name not in baselines:
            continue
        now = baselines[name]
        was = recorded.get(table.shape, {}).get("speedup")
        figures.append({"shape": table.shape, "baseline": name,
                        "now": [now.median, now.low, now.high], "recorded": was})
        if not math.isfinite(now.high):
            continue
        if now.high < 1.0:
            reasons.append(f"{table.shape}: now slower than {name} "
                           f"({now.median:.2f}x [{now.low:.2f}, {now.high:.2f}])")
        elif was and slower_than_recorded(now.high, was):
            reasons.append(f"{table.shape}: {now.median:.2f}x [{now.low:.2f}, {now.high:.2f}] "
                           f"over {name} now, {was[0]:.2f}x recorded")
    return figures


def slower_than_recorded(now_high: float, recorded: Sequence[float]) -> bool:
    """Whether a speedup now at most ``now_high`` (its CI's upper end) is below
    :data:`SLOWER_THAN_RECORDED` of the recorded one, ``[median, low, high]``: of its
    interval's lower end where it has one. Both figures are measurements: an unchanged
    kernel on a 2-core Xeon VM read 41-43x against 52-55x recorded a minute before, one
    refresh in four, at a shape whose calls take microseconds."""
    floor = recorded[1] if len(recorded) > 1 and math.isfinite(recorded[1]) else recorded[0]
    return now_high < SLOWER_THAN_RECORDED * floor
