"""Mutation adequacy: how many of a catalogue of plausible mistakes verification
catches, per tier and per class, and a fast corpus grown from what only the battery
catches.

Every operator of :data:`swarmfab.verify.mutants.CATALOGUE` is applied at every site of
the honest kernels (:mod:`._mutation_subjects`) and of stored champions. Mutants are
split once, by a fixed seed (a hash of the seed and the mutant's id), into a growth
half and a scoring half. Each mutant taken is judged by the fast corpus as it stood
(the built-in and stored cases, none grown here) and by the battery. A growth-half
mutant the battery kills and the fast corpus does not gives the corpus its killing
case (``grow``: the store; and the evaluator's corpus); the scoring half is then judged
by the grown cases too, and is never used for growth. A scoring mutant that survives
both tiers is checked on cases beyond the battery's: if it fails there, it is a mutant
the battery missed (its killing case is reported); if it passes, it is counted as
equivalent, with the reason.

Scores are killed / non-equivalent mutants of the scoring half, per tier and per class.
A mutant that does not build (killed trivially) or compiles to the original's very
binary (equivalent by construction) is counted apart and takes no place in the cap.
Verdicts are cached by mutant id and the names of the cases in a JSON file, so a
rerun is cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarmfab.errors import BuildError
from swarmfab.evaluation._evaluator import Evaluator
from swarmfab.evaluation._mutation_subjects import (
    BEYOND_ORIGIN,
    EQUIVALENT_WHY,
    Subject,
    beyond_cases,
    honest_kernels,
)
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.verify.mutants import CATALOGUE, Mutant, Operator, language_of, parses
from swarmfab.workloads import Case

__all__ = ["GROWN_ORIGIN", "Adequacy", "ClassScore", "MutantRecord", "Subject", "TierVerdict",
           "honest_kernels", "measure_adequacy"]

GROWN_ORIGIN = "adequacy: killed mutant"  # a stored case's origin: grown here


@dataclass(frozen=True, slots=True)
class TierVerdict:
    """One tier's verdict on a mutant: killed or not, why, and by which case."""

    killed: bool
    reason: str = ""
    case: str = ""

    @staticmethod
    def of(verdict: Verdict, cases: Sequence[Case]) -> TierVerdict:
        if verdict.status is Status.ACCEPTED:
            return TierVerdict(False)
        failed = verdict.failed_check
        return TierVerdict(True, verdict.reason[:400],
                           _case_named(failed.case, cases) if failed is not None else "")


def _case_named(check_case: str, cases: Sequence[Case]) -> str:
    """The case a check was made on: the longest case name that is the check's case, or
    its start before a parenthesis (``name (fresh inputs, same buffers)``)."""
    found = [case.name for case in cases
             if check_case == case.name or check_case.startswith(case.name + " (")]
    return max(found, key=len, default="")


@dataclass(slots=True)
class MutantRecord:
    """A mutant and what became of it."""

    id: str
    subject: str
    operator: str
    rule: str
    site: str
    half: str  # "growth" or "scoring"
    outcome: str = "not judged"  # judged, no build, same binary, not judged (budget)
    fast: TierVerdict | None = None  # the fast corpus before growth
    battery: TierVerdict | None = None
    grown: TierVerdict | None = None  # the cases grown here (scoring half)
    beyond: TierVerdict | None = None  # past the battery (survivors only)
    equivalent: str = ""  # why it counts as equivalent ("": it does not)

    @property
    def killed_fast_after(self) -> bool:
        return bool((self.fast and self.fast.killed) or (self.grown and self.grown.killed))

    @property
    def battery_miss(self) -> bool:
        return bool(self.beyond and self.beyond.killed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class ClassScore:
    """One class's figures on one half."""

    mutants: int = 0  # judged
    equivalent: int = 0
    killed_fast: int = 0  # by the fast corpus before growth
    killed_grown: int = 0  # by the fast corpus after growth
    killed_battery: int = 0
    killed_either: int = 0  # by swarmfab verify: the fast corpus as it stood, then the battery
    battery_misses: int = 0  # survived both tiers, failed beyond the battery
    no_build: int = 0
    same_binary: int = 0

    @property
    def non_equivalent(self) -> int:
        return self.mutants - self.equivalent

    def share(self, killed: int) -> float | None:
        return killed / self.non_equivalent if self.non_equivalent else None

    def add(self, record: MutantRecord) -> None:
        if record.outcome == "no build":
            self.no_build += 1
        elif record.outcome == "same binary":
            self.same_binary += 1
        if record.outcome != "judged":
            return
        self.mutants += 1
        if record.equivalent:
            self.equivalent += 1
            return
        fast = bool(record.fast and record.fast.killed)
        battery = bool(record.battery and record.battery.killed)
        self.killed_fast += fast
        self.killed_grown += record.killed_fast_after
        self.killed_battery += battery
        self.killed_either += fast or battery
        self.battery_misses += record.battery_miss

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = dataclasses.asdict(self)
        data["non_equivalent"] = self.non_equivalent
        for key in ("killed_fast", "killed_grown", "killed_battery", "killed_either"):
            share = self.share(data[key])
            data[f"{key}_share"] = None if share is None else round(share, 4)
        return data


@dataclass(slots=True)
class Adequacy:
    """A workload's mutation adequacy: every mutant's record and the corpus grown."""

    workload: str
    seed: int
    max_per_class: int
    subjects: list[dict[str, str]] = field(default_factory=list)  # label, id
    left_out: list[dict[str, str]] = field(default_factory=list)  # subjects failing a tier
    records: list[MutantRecord] = field(default_factory=list)
    available: dict[str, dict[str, int]] = field(default_factory=dict)  # class -> half -> n
    grown: list[dict[str, str]] = field(default_factory=list)  # case, mutant, operator
    corpus_before: int = 0
    battery_cases: int = 0
    beyond_cases: list[str] = field(default_factory=list)
    beyond_left_out: list[dict[str, str]] = field(default_factory=list)
    started: str = ""
    elapsed_s: float = 0.0
    stopped: str = ""  # why judging stopped early ("": it did not)
    host: dict[str, str] = field(default_factory=dict)

    def scores(self, half: str = "scoring") -> dict[str, ClassScore]:
        """Per class, in catalogue order, and "all"."""
        table = {op.name: ClassScore() for op in CATALOGUE}
        total = ClassScore()
        for record in self.records:
            if record.half == half:
                table.setdefault(record.operator, ClassScore()).add(record)
                total.add(record)
        return {**{name: score for name, score in table.items()
                   if score.mutants or score.no_build or score.same_binary}, "all": total}

    def equivalents(self) -> list[MutantRecord]:
        return [record for record in self.records if record.equivalent]

    def misses(self) -> list[MutantRecord]:
        return [record for record in self.records if record.battery_miss]

    def summary(self) -> dict[str, Any]:
        """Everything but the per-mutant records."""
        return {
            "workload": self.workload, "seed": self.seed, "max_per_class": self.max_per_class,
            "started": self.started, "elapsed_s": round(self.elapsed_s, 1),
            "stopped": self.stopped, "host": self.host, "subjects": self.subjects,
            "left_out": self.left_out, "corpus_before": self.corpus_before,
            "battery_cases": self.battery_cases, "grown": self.grown,
            "available": self.available,
            "beyond_cases": self.beyond_cases, "beyond_left_out": self.beyond_left_out,
            "scores": {half: {name: score.to_dict() for name, score in self.scores(half).items()}
                       for half in ("scoring", "growth")},
            "equivalent": [_brief(record) for record in self.equivalents()],
            "battery_misses": [_brief(record) for record in self.misses()],
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "mutants": [record.to_dict() for record in self.records]}


def _brief(record: MutantRecord) -> dict[str, Any]:
    return {"id": record.id, "half": record.half, "operator": record.operator,
            "rule": record.rule, "subject": record.subject, "site": record.site,
            "why": record.equivalent,
            "killed_beyond_by": record.beyond.case if record.beyond else ""}


class _Cache:
    """Tier verdicts by mutant id and case set, in a JSON file (None: in memory)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.data: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            try:
                self.data = json.loads(path.read_text())
            except (OSError, ValueError):
                self.data = {}

    @staticmethod
    def _key(tier: str, cases: Sequence[Case]) -> str:
        # by name: the battery's seeds are salted anew in every process
        names = "\0".join(sorted(case.name for case in cases))
        return f"{tier}:{hashlib.sha256(names.encode()).hexdigest()[:16]}"

    def get(self, candidate: str, tier: str, cases: Sequence[Case]) -> TierVerdict | None:
        found = self.data.get(candidate, {}).get(self._key(tier, cases))
        return None if found is None else TierVerdict(**found)

    def put(self, candidate: str, tier: str, cases: Sequence[Case], verdict: TierVerdict
            ) -> None:
        self.data.setdefault(candidate, {})[self._key(tier, cases)] = dataclasses.asdict(verdict)

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self.data))
        os.replace(partial, self.path)


def _rank(seed: int, candidate_id: str) -> int:
    digest = hashlib.sha256(f"{seed}:{candidate_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(slots=True)
class _Pending:
    record: MutantRecord
    candidate: Candidate
    mutant: Mutant
    subject: Subject
    rank: int


class _Harness:
    def __init__(self, evaluator: Evaluator, cache: _Cache, log: Callable[[str], None]):
        self.evaluator = evaluator
        self.cache = cache
        self.log = log
        self.binaries: dict[str, str] = {}  # subject id -> its binary's hash

    def judge(self, candidate: Candidate, tier: str, cases: Sequence[Case]) -> TierVerdict:
        cached = self.cache.get(candidate.id, tier, cases)
        if cached is not None:
            return cached
        if tier == "battery":
            verdict = self.evaluator.verify_battery(candidate)
        else:
            verdict = self.evaluator.verify(candidate, list(cases))
        result = TierVerdict.of(verdict, cases)
        if verdict.status is Status.BUILD_FAILED:
            result = dataclasses.replace(result, case="(build)")
        self.cache.put(candidate.id, tier, cases, result)
        return result

    def binary(self, candidate: Candidate) -> str | None:
        """The hash of a C candidate's built library (None: not C, or no build)."""
        if candidate.backend != "c":
            return ""
        try:
            artifact = self.evaluator.build(candidate)
        except BuildError:
            return None
        return hashlib.sha256(artifact.path.read_bytes()).hexdigest()


def measure_adequacy(
    evaluator: Evaluator, workload: str, subjects: Sequence[Subject], *, seed: int = 0,
    max_per_class: int = 10, budget_s: float | None = None,
    operators: Sequence[Operator] = CATALOGUE,
    grow: Callable[[Case], object] | None = None, cache_path: Path | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> Adequacy:
    """Measure ``evaluator``'s two tiers on the mutants of ``subjects`` (see the module's
    documentation): at most ``max_per_class`` mutants of each class judged in each half,
    no new mutant started after ``budget_s`` seconds. ``grow`` stores a case the growth
    half gives the corpus (the evaluator's corpus grows regardless)."""
    started = time.monotonic()
    result = Adequacy(workload, seed, max_per_class,
                      started=datetime.now(UTC).isoformat(timespec="seconds"), host=_host())
    harness = _Harness(evaluator, _Cache(cache_path), log)
    # the corpus as it stood: what this harness grew before is not part of it
    base = [case for case in evaluator.cases if not case.origin.startswith(GROWN_ORIGIN)]
    evaluator.cases[:] = base
    battery = evaluator.battery.cases()
    result.corpus_before, result.battery_cases = len(base), len(battery)
    kept = _honest(harness, subjects, base, battery, result)
    pending = _mutants(kept, operators, seed)
    for item in pending:
        halves = result.available.setdefault(item.record.operator, {"growth": 0, "scoring": 0})
        halves[item.record.half] += 1
    chosen = _choose(harness, pending, max_per_class, result, started, budget_s)
    for number, item in enumerate(chosen, start=1):
        if budget_s is not None and time.monotonic() - started > budget_s:
            result.stopped = f"budget of {budget_s:.0f} s spent"
            break
        tick = time.monotonic()
        record = item.record
        record.fast = harness.judge(item.candidate, "fast", base)
        record.battery = harness.judge(item.candidate, "battery", battery)
        record.outcome = "judged"
        harness.cache.save()
        log(f"[{number}/{len(chosen)}] {record.half} {record.operator}: {record.subject}, "
            f"{record.site}: fast {'killed' if record.fast.killed else 'survived'}, battery "
            f"{'killed' if record.battery.killed else 'survived'} "
            f"({time.monotonic() - tick:.0f} s)")
    grown = _grow(harness, chosen, battery, grow, result)
    _score_half(harness, chosen, grown, result)
    result.elapsed_s = time.monotonic() - started
    harness.cache.save()
    return result


def _honest(harness: _Harness, subjects: Sequence[Subject], base: list[Case],
            battery: list[Case], result: Adequacy) -> list[Subject]:
    """The subjects both tiers accept (a mutant of a wrong kernel measures nothing)."""
    kept, seen = [], set()
    for subject in subjects:
        candidate = subject.candidate
        if candidate.id in seen or language_of(candidate.backend) is None:
            continue
        seen.add(candidate.id)
        why = ""
        for tier, cases in (("fast", base), ("battery", battery)):
            verdict = harness.judge(candidate, tier, cases)
            if verdict.killed:
                why = f"the {tier} tier rejects it: {verdict.reason}"
                break
        binary = harness.binary(candidate)
        if why or binary is None:
            result.left_out.append({"label": subject.label, "id": candidate.id,
                                    "why": why or "it does not build"})
            harness.log(f"left out {subject.label}: {why}")
            continue
        harness.binaries[candidate.id] = binary
        result.subjects.append({"label": subject.label, "id": candidate.id,
                                "backend": candidate.backend})
        kept.append(subject)
    return kept


def _mutants(subjects: Sequence[Subject], operators: Sequence[Operator], seed: int
             ) -> list[_Pending]:
    """Every mutant of every subject, each text once (the first class that makes it)."""
    pending, seen = [], set()
    for subject in subjects:
        candidate = subject.candidate
        language = language_of(candidate.backend)
        assert language is not None
        source = candidate.sources[candidate.entry]
        for op in operators:
            for mutant in op.mutants(source, language):
                mutated = dataclasses.replace(
                    candidate, sources={**candidate.sources, candidate.entry: mutant.source},
                    parents=(candidate.id,), agent="adequacy",
                    rationale=f"{op.name}: {mutant.rule} at {mutant.site}")
                if mutated.id in seen:
                    continue
                seen.add(mutated.id)
                rank = _rank(seed, mutated.id)
                record = MutantRecord(mutated.id, subject.label, op.name, mutant.rule,
                                      mutant.site, "growth" if rank % 2 == 0 else "scoring")
                pending.append(_Pending(record, mutated, mutant, subject, rank))
    return pending


def _choose(harness: _Harness, pending: list[_Pending], cap: int, result: Adequacy,
            started: float, budget_s: float | None) -> list[_Pending]:
    """Per class and half, the first ``cap`` mutants in rank order that build and differ
    from their subject's binary; the others taken on the way are recorded as such. The
    choice is interleaved class by class, so a budget spreads over every class."""
    queues: dict[tuple[str, str], list[_Pending]] = {}
    for item in sorted(pending, key=lambda item: item.rank):
        queues.setdefault((item.record.operator, item.record.half), []).append(item)
    chosen: list[_Pending] = []
    taken = dict.fromkeys(queues, 0)
    while any(taken[key] < cap and queue for key, queue in queues.items()):
        for key, queue in queues.items():
            while taken[key] < cap and queue:
                item = queue.pop(0)
                result.records.append(item.record)
                if not parses(item.mutant):
                    item.record.outcome = "no build"
                    continue
                binary = harness.binary(item.candidate)
                if binary is None:
                    item.record.outcome = "no build"
                    continue
                if binary and binary == harness.binaries.get(item.subject.candidate.id):
                    item.record.outcome = "same binary"
                    item.record.equivalent = "compiles to the original's very binary"
                    continue
                taken[key] += 1
                chosen.append(item)
                break
    return chosen


def _grow(harness: _Harness, chosen: list[_Pending], battery: list[Case],
          grow: Callable[[Case], object] | None, result: Adequacy) -> list[Case]:
    """The cases the growth half gives the fast corpus: each growth mutant the battery
    kills and the corpus does not gives the battery case that killed it, renamed and
    kept with its exact seed."""
    grown: dict[str, Case] = {}
    for item in chosen:
        record = item.record
        if record.half != "growth" or record.outcome != "judged" or record.fast is None \
                or record.fast.killed or record.battery is None or not record.battery.killed:
            continue
        name = record.battery.case or _killing_case(harness, item.candidate, battery)
        case = next((c for c in battery if c.name == name), None)
        if case is None:
            continue
        if case.name not in grown:
            kept = dataclasses.replace(
                case, name="adequacy: " + case.name.removeprefix("battery: "),
                origin=f"{GROWN_ORIGIN} {record.id} ({record.operator})")
            grown[case.name] = kept
            harness.evaluator.add_case(kept)
            if grow is not None:
                grow(kept)
            harness.log(f"corpus grows by {kept.name!r} (killed {record.id}, "
                        f"{record.operator})")
        result.grown.append({"case": grown[case.name].name, "mutant": record.id,
                             "operator": record.operator})
    return list(grown.values())


def _killing_case(harness: _Harness, candidate: Candidate, battery: list[Case]) -> str:
    """The battery case that kills a candidate whose battery verdict named none (its
    job crashed): the cases one at a time."""
    for case in battery:
        if harness.judge(candidate, "fast", [case]).killed:
            return case.name
    return ""


def _score_half(harness: _Harness, chosen: list[_Pending], grown: list[Case],
                result: Adequacy) -> None:
    """The grown cases on the scoring mutants the fast corpus did not kill, then every
    survivor of both tiers past the battery: case by case (each its own job, so a long
    case has a job's time to itself), on the cases its honest kernel passes."""
    evaluator = harness.evaluator
    beyond, left_out = [], []
    for case in beyond_cases(evaluator.workload, evaluator.threads):
        case = case.in_dtype(evaluator.dtype)
        why = evaluator.battery._outside(case)
        if why:
            left_out.append({"case": case.name, "why": why})
        else:
            beyond.append(case)
    result.beyond_cases = [case.name for case in beyond]
    result.beyond_left_out = left_out
    evaluator.references.keep(beyond)
    passed: dict[str, list[Case]] = {}  # subject id -> the beyond cases it passes
    for item in chosen:
        record = item.record
        if record.outcome != "judged" or record.fast is None or record.battery is None:
            continue
        if grown and not record.fast.killed and record.half == "scoring":
            record.grown = harness.judge(item.candidate, "grown", grown)
        if record.killed_fast_after or record.battery.killed:
            continue
        honest = item.subject.candidate
        if honest.id not in passed:
            passed[honest.id] = [case for case in beyond
                                 if not harness.judge(honest, "beyond", [case]).killed]
            for case in beyond:
                if case not in passed[honest.id]:
                    result.beyond_left_out.append({
                        "case": case.name, "why": f"{item.subject.label} (honest) fails it: "
                        + harness.judge(honest, "beyond", [case]).reason[:200]})
        record.beyond = TierVerdict(False)
        for case in passed[honest.id]:
            verdict = harness.judge(item.candidate, "beyond", [case])
            if verdict.killed:
                record.beyond = dataclasses.replace(verdict, case=verdict.case or case.name)
                break
        if not record.beyond.killed:
            record.equivalent = EQUIVALENT_WHY.get(record.operator, "correct on every case")
        harness.log(f"{record.id} ({record.operator}) survived both tiers: "
                    + (f"killed beyond the battery by {record.beyond.case!r}"
                       if record.beyond.killed else "counted equivalent"))
        harness.cache.save()
    assert all(case.origin == BEYOND_ORIGIN for case in beyond)


def _host() -> dict[str, str]:
    model = ""
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "machine": platform.machine(),
            "cores": str(len(os.sched_getaffinity(0)))}
