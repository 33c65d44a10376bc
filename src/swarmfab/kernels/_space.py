"""Design spaces: the knobs a workload's templates expose, grouped by domain.

A design space turns a knob setting into a concrete :class:`Candidate` (rendered sources
plus compiler flags). Agents see only knobs, values and domains, never the template, so
nothing in an agent is specific to one workload.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from swarmfab.records import Candidate

__all__ = ["DesignSpace", "Knob", "KnobValue", "Setting"]

KnobValue = str | int
Setting = Mapping[str, KnobValue]


@dataclass(frozen=True, slots=True)
class Knob:
    """One decision. ``ordered`` knobs have neighbours (adjacent values); others do not."""

    name: str
    domain: str
    values: tuple[KnobValue, ...]
    default: KnobValue
    ordered: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise ValueError(f"knob {self.name}: default {self.default!r} not among its values")

    def neighbours(self, value: KnobValue) -> list[KnobValue]:
        """Values one step away: adjacent ones if ordered, every other value if not."""
        if not self.ordered:
            return [v for v in self.values if v != value]
        index = self.values.index(value)
        return [self.values[i] for i in (index - 1, index + 1) if 0 <= i < len(self.values)]


@dataclass(frozen=True, slots=True)
class DesignSpace:
    """Knobs plus a renderer from a full setting to sources, entry file and flags.

    ``backend_for`` picks the backend per setting when one space spans several kinds of
    source (a Triton and a CUDA template); by default every candidate uses ``backend``.
    ``starting`` names moves worth measuring before any search, each a partial setting
    with its reason (:class:`~swarmfab.agents.builtin.starting.StartingPointsAgent`).
    ``inert(setting, shape)`` names the knobs a call of ``shape`` never reads under
    ``setting`` (the recurrence's prefill knobs at one token per sequence): a move in
    those alone runs the same code there, so a timing of it there measures nothing but
    the two processes (:meth:`same_code_on`, which the gate uses).
    """

    name: str
    workload: str
    backend: str
    knobs: tuple[Knob, ...]
    render: Callable[[Setting, int], tuple[dict[str, str], str, tuple[str, ...]]]
    backend_for: Callable[[Setting], str] | None = None
    starting: tuple[tuple[Setting, str], ...] = ()
    inert: Callable[[Setting, Any], Collection[str]] | None = None

    def __post_init__(self) -> None:
        for move, _ in self.starting:
            self.validate({**self.default(), **move})

    @property
    def domains(self) -> list[str]:
        return sorted({knob.domain for knob in self.knobs})

    def knob(self, name: str) -> Knob:
        return next(k for k in self.knobs if k.name == name)

    def default(self) -> dict[str, KnobValue]:
        return {knob.name: knob.default for knob in self.knobs}

    def size(self) -> int:
        total = 1
        for knob in self.knobs:
            total *= len(knob.values)
        return total

    def validate(self, setting: Setting) -> None:
        for knob in self.knobs:
            if setting.get(knob.name) not in knob.values:
                given = setting.get(knob.name)
                raise ValueError(f"knob {knob.name}: {given!r} not in {knob.values}")

    def same_code_on(self, a: Setting, b: Setting, shape: Any) -> bool:
        """Whether settings ``a`` and ``b`` differ only in knobs a call of ``shape``
        never reads under either (:attr:`inert`); False where the space cannot tell."""
        names = {knob.name for knob in self.knobs}
        if self.inert is None or not (names <= set(a) and names <= set(b)):
            return False
        differ = {name for name in names if a[name] != b[name]}
        return bool(differ) and differ <= set(self.inert(a, shape)) & set(self.inert(b, shape))

    def live_knobs(self, setting: Setting, *, threads: int) -> list[Knob]:
        """Knobs with another value that renders a different candidate from ``setting``.

        A template ignores the knobs of the others (the chunk size means nothing to the
        recurrence), so a move there would be judged as the same candidate: a search
        that wants a real change picks among these."""
        base = self.instantiate(setting, threads=threads).id
        return [knob for knob in self.knobs if any(
            self.instantiate({**setting, knob.name: value}, threads=threads).id != base
            for value in knob.values if value != setting[knob.name])]

    def instantiate(
        self, setting: Setting, *, threads: int, parents: tuple[str, ...] = (),
        agent: str = "", rationale: str = "",
    ) -> Candidate:
        self.validate(setting)
        sources, entry, flags = self.render(setting, threads)
        return Candidate(
            workload=self.workload,
            backend=self.backend if self.backend_for is None else self.backend_for(setting),
            sources=sources, entry=entry,
            flags=flags, knobs=dict(setting), parents=parents, agent=agent, rationale=rationale,
        )
