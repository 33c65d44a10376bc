"""Plain, frozen records that cross package boundaries: candidates and verdicts.

They import nothing from the rest of swarmfab, so every layer can use them, and they
serialise to JSON-friendly dicts for the store and for ``--json`` output.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Candidate",
    "CheckResult",
    "Estimate",
    "Isolation",
    "Lesson",
    "ShapeTiming",
    "Status",
    "Verdict",
    "candidate_id",
]


class Status(StrEnum):
    """How an evaluation ended. Only ``accepted`` candidates can become champion."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    BUILD_FAILED = "build_failed"


def candidate_id(backend: str, sources: dict[str, str], flags: tuple[str, ...]) -> str:
    """Content hash of what gets built: backend, normalised sources and compiler flags.

    Knobs are not hashed separately: they are rendered into the sources and flags, so two
    knob settings that produce the same code are the same candidate.
    """
    normalised = {path: "\n".join(line.rstrip() for line in text.strip().splitlines())
                  for path, text in sorted(sources.items())}
    blob = json.dumps([backend, normalised, list(flags)], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Candidate:
    """An implementation to evaluate. ``entry`` names the source file to build or import."""

    workload: str
    backend: str
    sources: dict[str, str]
    entry: str
    flags: tuple[str, ...] = ()
    knobs: dict[str, str | int] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    agent: str = "user"
    rationale: str = ""

    @property
    def id(self) -> str:
        return candidate_id(self.backend, self.sources, self.flags)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["id"] = self.id
        return data


@dataclass(frozen=True, slots=True)
class Estimate:
    """A median with its 95% confidence interval."""

    median: float
    low: float
    high: float

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.median * factor, self.low * factor, self.high * factor)

    def inverted(self) -> Estimate:
        """1/x, e.g. a time ratio turned into a speedup (bounds swap)."""
        return Estimate(1 / self.median, 1 / self.high, 1 / self.low)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One verification check on one case: passed or not, with the figures behind it."""

    case: str
    check: str
    passed: bool
    detail: str = ""
    rms_ratio: float | None = None
    max_abs_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class ShapeTiming:
    """Side-by-side timing of a candidate and the incumbent on one target shape.

    ``ratio`` is candidate time / incumbent time (below 1 is faster); ``comparison`` is
    "faster", "slower" or "indistinguishable" as the confidence interval supports.
    ``beside_s`` and ``beside_ratio`` hold baselines timed in the same rounds that the
    candidate was not judged against (their time per call; candidate time / theirs): a
    run asks for them where the evaluation may have to stand in for its closing table.
    """

    shape: str
    incumbent: str
    candidate_s: Estimate
    incumbent_s: Estimate
    ratio: Estimate
    comparison: str
    samples: int
    roofline_fraction: float | None = None
    beside_s: dict[str, Estimate] = field(default_factory=dict)
    beside_ratio: dict[str, Estimate] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Isolation:
    """How the sandbox held where a candidate's code ran (``swarmfab.sandbox``): the
    level ("full": every guarantee the job needed held; "partial"; "none"; "off": no
    isolation was asked for), the steps that took effect and those that did not, and
    the guarantees that were missing. An empty level: not recorded (the candidate never
    ran, or the verdict predates the record)."""

    level: str = ""
    held: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: the level, what was missing, what held and what did not."""
        if not self.level:
            return "not recorded"
        parts = [self.level]
        if self.missing:
            parts.append(f"missing: {', '.join(self.missing)}")
        if self.held:
            parts.append(f"held: {', '.join(self.held)}")
        if self.failed:
            parts.append(f"did not hold: {', '.join(self.failed)}")
        return "; ".join(parts)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Isolation:
        return Isolation(str(data.get("level", "")), *(tuple(data.get(key, ())) for key in
                                                          ("held", "failed", "missing")))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of evaluating one candidate; ``isolation``: how the sandbox held where
    its code ran."""

    candidate_id: str
    status: Status
    reason: str
    checks: tuple[CheckResult, ...] = ()
    timings: tuple[ShapeTiming, ...] = ()
    elapsed_s: float = 0.0
    diagnostics: tuple[str, ...] = ()
    isolation: Isolation = field(default_factory=Isolation)

    @property
    def failed_check(self) -> CheckResult | None:
        return next((check for check in self.checks if not check.passed), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Verdict:
        def estimate(raw: dict[str, float]) -> Estimate:
            return Estimate(**raw)

        timings = tuple(
            ShapeTiming(**{**t, "candidate_s": estimate(t["candidate_s"]),
                           "incumbent_s": estimate(t["incumbent_s"]),
                           "ratio": estimate(t["ratio"]),
                           **{key: {name: estimate(e) for name, e in t.get(key, {}).items()}
                              for key in ("beside_s", "beside_ratio")}})
            for t in data.get("timings", ())
        )
        return Verdict(
            candidate_id=data["candidate_id"], status=Status(data["status"]),
            reason=data["reason"], checks=tuple(CheckResult(**c) for c in data.get("checks", ())),
            timings=timings, elapsed_s=data.get("elapsed_s", 0.0),
            diagnostics=tuple(data.get("diagnostics", ())),
            isolation=Isolation.from_dict(data.get("isolation") or {}),
        )


@dataclass(frozen=True, slots=True)
class Lesson:
    """What earlier runs measured about one knob move, merged for the context asking.

    ``effect`` is the child's time over its parent's when only ``knob`` changed from
    ``from_value`` to ``to_value`` (below 1: the move made the kernel faster), with a 95%
    CI; None when every child that made the move failed verification or its build.
    ``similarity`` is how close the evidence's context is to the asking one (1: same
    workload, device class and shape class); evidence from further away counts for less.
    """

    knob: str
    from_value: str | int
    to_value: str | int
    effect: Estimate | None
    pairs: int
    failures: int
    similarity: float
    contexts: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    candidates: tuple[tuple[str, str], ...] = ()  # (child, parent) ids behind the lesson

    @property
    def move(self) -> str:
        return f"{self.knob}: {self.from_value} -> {self.to_value}"

    @property
    def outcome(self) -> str:
        """helps / hurts / no effect (CI within 5% of 1) / unclear."""
        if self.effect is None:
            return "hurts" if self.failures else "unclear"
        if self.effect.high < 1:
            return "helps"
        if self.effect.low > 1 or (self.failures and self.failures >= self.pairs):
            return "hurts"
        if self.effect.low >= 0.95 and self.effect.high <= 1.05:
            return "no effect"
        return "unclear"

    def text(self) -> str:
        """One line for an LLM agent's prompt."""
        if self.effect is None:
            measured = "never measured: every attempt failed"
        else:
            e = self.effect
            measured = (f"time x{e.median:.2f} (95% CI {e.low:.2f}-{e.high:.2f}) "
                        f"over {self.pairs} pair(s)")
        failed = f", {self.failures} failed attempt(s)" if self.failures and self.effect else ""
        return (f"{self.move}: {self.outcome}; {measured}{failed}; {len(self.runs)} run(s), "
                f"similarity {self.similarity:.2f} ({'; '.join(self.contexts)})")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome
        return data
