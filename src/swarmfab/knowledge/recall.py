"""Champions of earlier related runs: where a new run can start instead of the default.

A lesson says that one move helped; a champion is the whole setting that won, every knob
at once, including combinations no single move shows (a template change that pays only
with two other knobs changed too). A new run in a related context (same workload family;
workload, device class and shape classes weighted as for lessons) first proposes those
settings, the most similar context first, projected onto its own design space. The
verifier and the gate judge them like any other candidate: a recalled setting that is
wrong or slow here costs one evaluation and is never crowned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from swarmfab.kernels import DesignSpace, KnobValue
from swarmfab.knowledge.lessons import LessonContext, device_class, shape_class

__all__ = ["Champion", "Recalled", "project", "recall_champions"]

MIN_SIMILARITY = 0.1  # below this a champion says little about the asking context


@dataclass(frozen=True, slots=True)
class Champion:
    """An earlier run's champion, as the store holds it."""

    run_id: str
    workload: str
    host: Mapping[str, Any]
    shape_labels: tuple[str, ...]  # the shapes its verdict was timed on
    knobs: Mapping[str, KnobValue]
    started_at: datetime
    failed_refresh: bool = False  # its latest refresh found it no longer verifies


@dataclass(frozen=True, slots=True)
class Recalled:
    """A champion setting offered to a new run, and why."""

    run_id: str
    context: str  # "kda | cpu-x86_64-avx512-t2_4 | prefill-s"
    knobs: dict[str, KnobValue]
    similarity: float

    def describe(self) -> str:
        return f"champion of run {self.run_id} ({self.context}; similarity {self.similarity:.2f})"


def recall_champions(champions: Iterable[Champion], context: LessonContext, limit: int = 3
           ) -> list[Recalled]:
    """Up to ``limit`` champion settings for ``context``: most similar first, then newest,
    and any that a refresh found no longer verifies after all the others; one entry per
    distinct setting."""
    scored = []
    for champion in champions:
        if not champion.knobs:
            continue  # hand-written or LLM code: no setting to carry over
        device = device_class(champion.host)
        classes = tuple(dict.fromkeys(shape_class(label) for label in champion.shape_labels))
        weight = context.similarity_to(champion.workload, device, classes)
        if weight >= MIN_SIMILARITY:
            label = f"{champion.workload} | {device} | {', '.join(classes) or 'no shapes'}"
            scored.append((weight, champion.started_at, champion, label))
    scored.sort(key=lambda item: (item[2].failed_refresh, -item[0], -item[1].timestamp()))
    chosen: list[Recalled] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for weight, _, champion, label in scored:
        key = tuple(sorted((name, repr(value)) for name, value in champion.knobs.items()))
        if key in seen:
            continue
        seen.add(key)
        chosen.append(Recalled(champion.run_id, label, dict(champion.knobs), round(weight, 3)))
        if len(chosen) >= limit:
            break
    return chosen


def project(knobs: Mapping[str, KnobValue], space: DesignSpace) -> dict[str, KnobValue]:
    """A recalled setting in ``space``: its value where the space has that knob and
    allows the value, the space's default elsewhere."""
    setting = space.default()
    for knob in space.knobs:
        value = knobs.get(knob.name)
        if value is not None and value in knob.values:
            setting[knob.name] = value
    return setting
