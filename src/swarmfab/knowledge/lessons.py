"""Lessons: what earlier runs measured about knob moves, for the runs that come after.

Evidence is a child/parent pair of one run that differs in exactly one knob: its time
ratio per target shape (the child's interleaved ratio against its parent when the parent
was the incumbent; otherwise the ratio of the two medians, their intervals combined) is
one measurement of that move's effect. A child that failed verification or its build is
a failure of the move.

When a run ends, its measurements are summarised per context and move (``extract``) and
stored, one row per (run, shape class, move). A new run asks for the lessons of its own
context (``merge``): rows of every run of the same workload family are combined in log
space, each weighted by its precision times its similarity to the asking context, so the
exact context counts most, then the same family on another shape class or device.

A context is (workload family, device class, shape class): kda and gdn are both
"delta-rule"; a device class is the CPU architecture, its widest vector ISA and a thread
bucket; a shape class is decode (T=1) or prefill by the size of the problem.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmfab.records import Candidate, Estimate, Lesson, ShapeTiming, Status, Verdict

__all__ = [
    "Evidence",
    "LessonContext",
    "device_class",
    "extract",
    "family_of",
    "merge",
    "shape_class",
    "summarise",
]

Z95 = 1.96
MIN_LOG_SE = 0.005  # no single measurement is trusted to better than half a percent
SHAPE_CLASSES = ("decode", "prefill-xs", "prefill-s", "prefill-m", "prefill-l")
_LABEL = re.compile(r"B(\d+) T(\d+) H(\d+)(?:/HV(\d+))? K(\d+) V(\d+)")
# an engine run's label (serving.goal.EngineGoal.run_label): model size, then traffic
_ENGINE_LABEL = re.compile(r"^([\d.]+)([KMBT]?) (?:c(\d+)|\S+ req/s) "
                           r"(?:in\d+ out\d+(?: r[\d.]+)?|prompts:\S+)$")
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


# -- context keys ----------------------------------------------------------------------
def family_of(workload: str) -> str:
    """The workload's family (kda, gdn -> delta-rule); its own name when it has none."""
    from swarmfab.errors import WorkloadError
    from swarmfab.workloads import get_workload

    try:
        return get_workload(workload).family or workload
    except WorkloadError:
        return workload


def family_members(family: str) -> list[str]:
    """Every workload name whose family is ``family`` (the family's own name included)."""
    from swarmfab.workloads import workload_names

    return sorted({family, *(name for name in workload_names() if family_of(name) == family)})


def device_class(host: Mapping[str, Any]) -> str:
    """e.g. ``cpu-x86_64-avx512-t2_4``: architecture, widest vector ISA, thread bucket."""
    isa = str(host.get("isa", ""))
    arch = isa.split(" ", 1)[0] or str(host.get("machine", "unknown"))
    flags = isa.split()[1:]
    vector = next((name for name in ("avx512", "avx2", "avx") if any(
        flag.startswith(name) for flag in flags)), "scalar")
    threads = int(host.get("threads", 1))
    bucket = "t1" if threads == 1 else "t2_4" if threads <= 4 else "t5_16" if threads <= 16 \
        else "t17+"
    return f"cpu-{arch}-{vector}-{bucket}"


def shape_class(label: str) -> str:
    """decode (T=1) or prefill by B*T*HV*K*V; for an engine run, the model's size and
    the load (e.g. ``engine-s-c8``: 10M-300M parameters, 2-8 concurrent requests);
    "other" for shapes of other workloads."""
    engine = _ENGINE_LABEL.match(label)
    if engine is not None:
        return _engine_class(float(engine[1]) * _SCALE[engine[2]], engine[3])
    match = _LABEL.search(label)
    if match is None:
        return "other"
    b, t, h, hv, k, v = (int(group) if group else None for group in match.groups())
    assert b and t and h and k and v
    if t == 1:
        return "decode"
    size = b * t * (hv or h) * k * v
    for limit, name in ((2**20, "prefill-xs"), (2**24, "prefill-s"), (2**28, "prefill-m")):
        if size < limit:
            return name
    return "prefill-l"


@dataclass(frozen=True, slots=True)
class LessonContext:
    """Who is asking: a run's workload, device class and the classes of its shapes."""

    workload: str
    device_class: str
    shape_classes: tuple[str, ...]

    @property
    def family(self) -> str:
        return family_of(self.workload)

    @staticmethod
    def of(workload: str, host: Mapping[str, Any], shape_labels: Iterable[str]
           ) -> LessonContext:
        classes = tuple(dict.fromkeys(shape_class(label) for label in shape_labels))
        return LessonContext(workload, device_class(host), classes)

    def similarity(self, row: Evidence) -> float:
        """1 for the same workload, device and shape class; less the further away."""
        return self.similarity_to(row.workload, row.device_class, (row.shape_class,))

    def similarity_to(self, workload: str, device: str, shape_classes: Iterable[str]) -> float:
        """How close another context is: 0 for another family; workload, device class and
        the nearest pair of shape classes weigh in as factors."""
        if family_of(workload) != self.family:
            return 0.0
        same_workload = 1.0 if workload == self.workload else 0.8
        same_arch = device.rsplit("-", 1)[0] == self.device_class.rsplit("-", 1)[0]
        same_device = 1.0 if device == self.device_class else 0.6 if same_arch else 0.3
        shape = max((_shape_similarity(theirs, mine) for theirs in shape_classes
                     for mine in self.shape_classes), default=0.3)
        return same_workload * same_device * shape


def _engine_class(parameters: float, concurrency: str | None) -> str:
    size = next((name for limit, name in ((1e7, "xs"), (3e8, "s"), (3e9, "m"), (3e10, "l"))
                 if parameters < limit), "xl")
    if concurrency is None:
        return f"engine-{size}-open"  # arrivals at a rate
    load = next((f"c{limit}" for limit in (1, 8, 32) if int(concurrency) <= limit), "c33+")
    return f"engine-{size}-{load}"


def _shape_similarity(a: str, b: str) -> float:
    if a == b:
        return 1.0
    if a.startswith("engine-") and b.startswith("engine-"):  # the same model size?
        return 0.6 if a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0] else 0.3
    if a in SHAPE_CLASSES and b in SHAPE_CLASSES and "decode" not in (a, b) \
            and abs(SHAPE_CLASSES.index(a) - SHAPE_CLASSES.index(b)) == 1:
        return 0.6
    return 0.3


# -- evidence of one run -----------------------------------------------------------------
@dataclass(slots=True)
class Evidence:
    """One run's summary for one move in one context (a row of the ``lessons`` table)."""

    run_id: str
    workload: str
    family: str
    device_class: str
    shape_class: str
    knob: str
    from_value: str  # JSON of the knob value, so 8 and "8" stay apart
    to_value: str
    log_ratio: float | None
    log_se: float | None
    pairs: int
    failures: int
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def context(self) -> str:
        return f"{self.workload} | {self.device_class} | {self.shape_class}"


@dataclass(slots=True)
class _Pairs:
    """Measurements of one move in one shape class, while a run is being summarised."""

    logs: list[tuple[float, float]] = field(default_factory=list)  # (log ratio, se)
    failures: int = 0
    evidence: list[dict[str, Any]] = field(default_factory=list)


def _single_change(parent: Mapping[str, Any], child: Mapping[str, Any]
                   ) -> tuple[str, Any, Any] | None:
    if not parent or set(parent) != set(child):
        return None
    changed = [name for name in child if child[name] != parent[name]]
    if len(changed) != 1:
        return None
    return changed[0], parent[changed[0]], child[changed[0]]


def _log_se(estimate: Estimate) -> float:
    if estimate.low <= 0 or estimate.high <= 0:
        return math.inf
    return max(MIN_LOG_SE, (math.log(estimate.high) - math.log(estimate.low)) / (2 * Z95))


def _pair_log_ratio(child: ShapeTiming, parent_timings: Mapping[str, ShapeTiming],
                    parent_was_incumbent: bool) -> tuple[float, float] | None:
    """log(child time / parent time) on one shape, with its standard error."""
    if parent_was_incumbent and child.incumbent == "champion":
        return math.log(child.ratio.median), _log_se(child.ratio)  # timed interleaved
    parent = parent_timings.get(child.shape)
    if parent is None or parent.candidate_s.median <= 0 or child.candidate_s.median <= 0:
        return None
    ratio = child.candidate_s.median / parent.candidate_s.median
    se = math.hypot(_log_se(child.candidate_s), _log_se(parent.candidate_s))
    return math.log(ratio), se


def extract(run_id: str, workload: str, host: Mapping[str, Any],
            judged: Sequence[tuple[Candidate, Verdict, bool]]) -> list[Evidence]:
    """Summarise a run's single-knob child/parent pairs per shape class and move.

    ``judged`` is the run's (candidate, verdict, became champion) in evaluation order.
    """
    by_id = {candidate.id: (candidate, verdict) for candidate, verdict, _ in judged}
    run_classes = sorted({shape_class(t.shape) for _, v, _ in judged for t in v.timings})
    moves: dict[tuple[str, str, Any, Any], _Pairs] = defaultdict(_Pairs)
    champion: str | None = None
    for candidate, verdict, crowned in judged:
        parent_id = candidate.parents[0] if len(candidate.parents) == 1 else None
        parent = by_id.get(parent_id) if parent_id else None
        change = _single_change(parent[0].knobs, candidate.knobs) if parent else None
        if parent is not None and change is not None:
            _add_pair(moves, run_classes, candidate, verdict, parent[1], change,
                      parent_was_incumbent=parent_id == champion)
        if crowned:
            champion = candidate.id
    family, device = family_of(workload), device_class(host)
    return [_summary(run_id, workload, family, device, key, pairs)
            for key, pairs in sorted(moves.items(), key=lambda item: str(item[0]))]


def _add_pair(moves: dict[tuple[str, str, Any, Any], _Pairs], run_classes: list[str],
              child: Candidate, verdict: Verdict, parent: Verdict,
              change: tuple[str, Any, Any], *, parent_was_incumbent: bool) -> None:
    knob, before, after = change
    pair = {"child": child.id, "parent": child.parents[0]}
    if verdict.status is not Status.ACCEPTED:
        for cls in run_classes:
            entry = moves[(cls, knob, before, after)]
            entry.failures += 1
            entry.evidence.append({**pair, "failed": verdict.status.value})
        return
    parent_timings = {t.shape: t for t in parent.timings}
    for timing in verdict.timings:
        measured = _pair_log_ratio(timing, parent_timings, parent_was_incumbent)
        if measured is None or not math.isfinite(measured[1]):
            continue
        entry = moves[(shape_class(timing.shape), knob, before, after)]
        entry.logs.append(measured)
        entry.evidence.append({**pair, "shape": timing.shape,
                               "ratio": round(math.exp(measured[0]), 4),
                               "log_se": round(measured[1], 4),
                               "paired": parent_was_incumbent and timing.incumbent == "champion"})


def _combine(logs: Sequence[tuple[float, float]], weights: Sequence[float] | None = None
             ) -> tuple[float, float]:
    """Precision-weighted mean of log ratios and its standard error, widened when the
    measurements disagree more than their own errors say (between-pair spread)."""
    shares = weights or [1.0] * len(logs)
    precision = [w / se**2 for w, (_, se) in zip(shares, logs, strict=True)]
    total = sum(precision)
    mean = sum(p * value for p, (value, _) in zip(precision, logs, strict=True)) / total
    se = 1 / math.sqrt(total)
    if len(logs) >= 2:
        se = max(se, statistics.stdev(value for value, _ in logs) / math.sqrt(len(logs)))
    return mean, se


def _summary(run_id: str, workload: str, family: str, device: str,
             key: tuple[str, str, Any, Any], pairs: _Pairs) -> Evidence:
    cls, knob, before, after = key
    mean, se = _combine(pairs.logs) if pairs.logs else (None, None)
    measured = len({(e["child"], e["parent"]) for e in pairs.evidence if "ratio" in e})
    return Evidence(run_id, workload, family, device, cls, knob, json.dumps(before),
                    json.dumps(after), mean, se, measured, pairs.failures, pairs.evidence)


# -- lessons for a new run ---------------------------------------------------------------
def merge(rows: Iterable[Evidence], context: LessonContext) -> list[Lesson]:
    """The lessons for ``context``: every move's rows combined, weighted by similarity."""
    groups: dict[tuple[str, str, str], list[tuple[Evidence, float]]] = defaultdict(list)
    for row in rows:
        weight = context.similarity(row)
        if weight > 0:
            groups[(row.knob, row.from_value, row.to_value)].append((row, weight))
    lessons = [_lesson(key, members) for key, members in groups.items()]
    return sorted(lessons, key=_rank)


def summarise(rows: Iterable[Evidence]) -> list[tuple[str, Lesson]]:
    """Lessons per exact context (workload, device class, shape class), runs merged."""
    by_context: dict[str, list[Evidence]] = defaultdict(list)
    for row in rows:
        by_context[row.context].append(row)
    listed = []
    for name in sorted(by_context):
        first = by_context[name][0]
        asking = LessonContext(first.workload, first.device_class, (first.shape_class,))
        listed += [(name, lesson) for lesson in merge(by_context[name], asking)]
    return listed


def _lesson(key: tuple[str, str, str], members: list[tuple[Evidence, float]]) -> Lesson:
    knob, before, after = key
    measured = [(row, w) for row, w in members if row.log_ratio is not None and row.log_se]
    effect = None
    if measured:
        mean, se = _combine([(row.log_ratio, row.log_se) for row, _ in measured],  # type: ignore[misc]
                            [w for _, w in measured])
        effect = Estimate(math.exp(mean), math.exp(mean - Z95 * se), math.exp(mean + Z95 * se))
    rows = [row for row, _ in members]
    return Lesson(
        knob=knob, from_value=json.loads(before), to_value=json.loads(after), effect=effect,
        pairs=sum(row.pairs for row in rows), failures=sum(row.failures for row in rows),
        similarity=round(max(w for _, w in members), 3),
        contexts=tuple(sorted({row.context for row in rows})),
        runs=tuple(sorted({row.run_id for row in rows})),
        candidates=tuple(dict.fromkeys(
            (e["child"], e["parent"]) for row in rows for e in row.evidence)),
    )


def _rank(lesson: Lesson) -> tuple[int, float, str]:
    order = {"helps": 0, "unclear": 1, "no effect": 2, "hurts": 3}[lesson.outcome]
    return order, lesson.effect.median if lesson.effect else math.inf, lesson.move
