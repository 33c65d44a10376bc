"""``swarmfab model``'s job, stage by stage, inside one budget.

1. **Profile** each phase: every part's share of the time, the top operators.
2. **Extract** the parts worth working on, largest share first, until ``coverage`` of
   the profiled time is covered (or ``max_parts``): a problem file each, or, where the
   part's heart is a workload swarmfab has (:mod:`.known`: Kimi Linear's KDA layer),
   that workload at the model's shapes.
3. **Optimise** each chosen part with the factory (its own run, verifier and store
   records), under a budget split by the parts' shares. The closing stage's time is
   reserved first. The command layer is the :class:`Factory`: it runs a goal and turns
   a workload's champion into an exported operator.
4. **Assemble** the crowned parts into the model, **check** it end to end against the
   original (a part that fails there, alone, is dropped and named), and **time** each
   phase original and patched, side by side.

Every stage says what it took; what the budget left no time for is said, not skipped
silently.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from swarmfab.kernels import BF16_FLAGS, host_cpu_flags
from swarmfab.model.assemble import (
    EndToEnd,
    OperatorPatch,
    Patched,
    PhaseTiming,
    check_end_to_end,
    time_side_by_side,
)
from swarmfab.model.export import write_patched
from swarmfab.model.extract import extract_part
from swarmfab.model.known import known_part
from swarmfab.model.profile import PhaseProfile, find_parts, merged_share, profile_phase
from swarmfab.model.target import Target, phases_of
from swarmfab.records import Candidate
from swarmfab.workloads import Tolerances

__all__ = ["Factory", "Options", "PartOutcome", "Study", "precision_refusal", "study"]

Log = Callable[[str], None]
MIN_PART_S = 60.0  # a part's run: setup, a few evaluations, the closing table
MIN_SHARE = 0.02   # a part under this share of the time is not worth a run
COMPILE_S = 15.0   # a crowned part's first call in the model (a compile), per instance
MIN_ROUNDS = 3     # fewer rounds give no interval worth printing
PACKAGE_S = 10.0   # a workload's champion exported and built as a package
DEFAULT_TOLERANCES = Tolerances(rms_ratio=1e-4, max_abs_ratio=1e-3)  # float32
# parts that may compute in bfloat16 (``precision = "bfloat16"``): about twice what the
# dense example measured with every GEMM in bfloat16 (an MLP alone: RMS ratio 5.2e-3;
# the whole model's logits: 7.4e-3 to 8.7e-3, max-abs ratio 7.5e-3 to 1.0e-2)
BF16_TOLERANCES = Tolerances(rms_ratio=2e-2, max_abs_ratio=5e-2)
PRECISIONS = ("float32", "bfloat16")


def precision_refusal(precision: str) -> str:
    """Why ``precision`` is refused on this host ("" where it is not): bfloat16 needs a
    CPU with bfloat16 instructions (the design spaces offer it nowhere else)."""
    if precision == "bfloat16" and not host_cpu_flags() & BF16_FLAGS:
        return (f"this CPU has no bfloat16 instructions (none of "
                f"{', '.join(sorted(BF16_FLAGS))}): its parts would only get slower in "
                "bfloat16; use --precision float32")
    return ""


@dataclass(frozen=True)
class Options:
    budget_s: float = 900.0
    tokens: int = 512
    batch: int = 1
    new_tokens: int = 16
    threads: int = 1
    coverage: float = 0.8
    max_parts: int = 6
    rounds: int = 7
    profile_only: bool = False
    # "bfloat16": parts may compute in bfloat16; they and the model are held to
    # BF16_TOLERANCES, and the model is judged on its logits alone (not greedy tokens)
    precision: str = "float32"
    tolerances: Tolerances | None = None  # None: the precision's

    @property
    def limits(self) -> Tolerances:
        """The tolerances parts and the model are held to."""
        if self.tolerances is not None:
            return self.tolerances
        return BF16_TOLERANCES if self.precision == "bfloat16" else DEFAULT_TOLERANCES


@dataclass
class PartOutcome:
    key: str
    class_name: str
    instances: int
    share: float  # averaged over the phases
    problem: str | None = None  # its problem file, or
    workload: str | None = None  # the workload it maps to, at
    shapes: list[dict[str, int]] = field(default_factory=list)  # the model's shapes
    note: str = ""
    run_id: str | None = None
    champion: str | None = None  # the crowned candidate's id
    speedups: list[float] = field(default_factory=list)  # its run's, per target shape
    patched: bool = False


class Factory(Protocol):
    """What the stages ask of the factory (the command layer provides it)."""

    def optimise(self, part: PartOutcome, seconds: float) -> Any:
        """A run on the part's problem file or workload, its budget ``seconds``: a
        result with ``run_id`` and ``champion`` (a Candidate, or None)."""

    def operator(self, part: PartOutcome, champion: Candidate) -> OperatorPatch:
        """A workload part's champion as an operator patched into the model's library."""


@dataclass
class Study:
    target: str
    profiles: list[PhaseProfile]
    parts: list[PartOutcome]
    precision: str = "float32"  # what the parts may compute in
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage
    end_to_end: EndToEnd | None = None
    timings: list[PhaseTiming] = field(default_factory=list)
    predicted: dict[str, float] = field(default_factory=dict)  # Amdahl, per phase
    after: list[PhaseProfile] = field(default_factory=list)  # the patched model's profile
    exported: str = ""  # apply.py of the parts that passed (model/export.py)
    champion_calls: int = 0
    fallback_calls: int = 0  # calls of another form, run by the original parts
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def study(target: Target, options: Options, out: Path, factory: Factory, log: Log,
          started: float) -> Study:
    """The whole job on ``target``, inside ``options.budget_s`` from ``started``."""
    deadline = started + options.budget_s
    phases = phases_of(target, tokens=options.tokens, batch=options.batch,
                       new_tokens=options.new_tokens)
    stage = time.monotonic()
    log(f"profile: {', '.join(phase.label for phase in phases)}")
    profiles = [profile_phase(target.module, phase) for phase in phases]
    result = Study(target.description, profiles, [], options.precision)
    result.stages["profile"] = time.monotonic() - stage

    stage = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    instances = find_parts(target.module)
    shares = merged_share(profiles)
    config = getattr(target.module, "config", None)
    covered, chosen = 0.0, list[PartOutcome]()
    for number, (key, share) in enumerate(sorted(shares.items(), key=lambda s: -s[1]), 1):
        part = _recorded(profiles, key)
        outcome = PartOutcome(key, part.class_name, len(instances[key]), share)
        result.parts.append(outcome)
        if covered >= options.coverage or len(chosen) >= options.max_parts:
            outcome.note = "not extracted: the parts before it cover enough"
            continue
        if share < MIN_SHARE:
            outcome.note = f"not extracted: under {MIN_SHARE:.0%} of the time"
            continue
        known = known_part(instances[key][0][1], options.tokens, options.batch)
        if known is not None and target.causal_lm:
            outcome.workload, outcome.shapes = known.workload, list(known.shapes)
            covered += share
            chosen.append(outcome)
            continue
        extraction = extract_part(part, instances[key][0][1], config, out, number,
                                  target.description)
        if extraction.path is None:
            outcome.note = f"not extracted: {extraction.reason}"
            continue
        outcome.problem = str(extraction.path)
        covered += share
        chosen.append(outcome)
    result.stages["extract"] = time.monotonic() - stage
    log(f"extracted {len(chosen)} part(s) covering {covered:.0%} of the profiled time "
        f"into {out}")
    if options.profile_only or not chosen:
        if not chosen:
            result.notes.append("no part could be extracted: nothing to optimise")
        return result

    stage = time.monotonic()
    reserve = max(0.1 * options.budget_s, _closing_estimate(profiles, chosen, options))
    crowned = _optimise(chosen, deadline - reserve, factory, log)
    result.stages["optimise"] = time.monotonic() - stage

    stage = time.monotonic()
    _assemble_and_time(result, target, phases, out, instances, crowned, factory, options,
                       log, deadline)
    result.stages["assemble, check, time"] = time.monotonic() - stage
    return result


def _recorded(profiles: list[PhaseProfile], key: str) -> Any:
    """The part's profile from the first phase that called it (prefill's, where both)."""
    found = [part for profile in profiles for part in profile.parts if part.key == key]
    return next((part for part in found if part.args or part.kwargs), found[0])


def _closing_estimate(profiles: list[PhaseProfile], chosen: list[PartOutcome],
                      options: Options) -> float:
    """Seconds the closing stage needs: the champions' compiles, the end-to-end check,
    and every phase run 2 x rounds + 7 times (warm-ups, the check's own, the patched
    model's profile)."""
    runs = sum(profile.seconds for profile in profiles) * (2 * options.rounds + 7)
    builds = sum(PACKAGE_S if part.workload else COMPILE_S * part.instances
                 for part in chosen)
    return builds + 1.2 * runs


def _optimise(chosen: list[PartOutcome], until: float, factory: Factory, log: Log
              ) -> dict[str, Candidate]:
    """Each chosen part's run, its budget its share of what is left (largest first; a
    part whose share would fall under MIN_PART_S waits for the ones before it). Returns
    the crowned candidates by part key."""
    crowned = {}
    for index, part in enumerate(chosen):
        left = until - time.monotonic()
        pending = chosen[index:]
        seconds = left * part.share / sum(p.share for p in pending)
        if seconds < MIN_PART_S:
            seconds = left if left >= MIN_PART_S else 0.0
        if seconds < MIN_PART_S:
            part.note = (f"not optimised: {max(left, 0):.0f} s of the budget left, a run "
                         f"needs {MIN_PART_S:.0f} s (a larger --budget)")
            continue
        what = f"the {part.workload} workload" if part.workload else Path(
            part.problem or "").name
        log(f"optimise {part.class_name} ({part.share:.0%} of the time) as {what}: "
            f"{seconds:.0f} s")
        try:
            run = factory.optimise(part, seconds)
        except Exception as exc:  # one part's failure is its row; the others go on
            part.note = f"its run failed: {type(exc).__name__}: {exc}"
            continue
        part.run_id = run.run_id
        if run.champion is None:
            part.note = "nothing faster than its baselines was found"
            continue
        part.champion = run.champion.id
        estimates = [_over_baselines(table) for table in getattr(run, "final", [])]
        part.speedups = [median for median, _ in estimates]
        if estimates and not any(low > 1.0 for _, low in estimates):
            # crowned over its run's starting point, yet no faster than what the model ran
            shown = " / ".join(f"{median:.2f}x" for median in part.speedups)
            part.note = (f"not patched: its champion ran {shown} the model's own code in "
                         "its run's closing table, not faster with a 95% CI above 1")
            log(f"{part.class_name}: {part.note}")
            continue
        crowned[part.key] = run.champion
    return crowned


def _over_baselines(table: Any) -> tuple[float, float]:
    """The champion's speedup in its run's closing table, and its CI's lower end: over
    eager PyTorch where it was timed (what the model ran), else over the fastest
    baseline."""
    ratios = {name: (estimate.median, estimate.low)
              for name, estimate in table.ratio_to_reference.items()
              if name != table.reference}
    if "torch-eager" in ratios:
        return ratios["torch-eager"]
    return min(ratios.values(), default=(1.0, 1.0))


def amdahl(profiles: list[PhaseProfile], parts: list[PartOutcome]) -> dict[str, float]:
    """Each phase's speedup if every patched part ran at its run's speedup there and
    the rest as it was. A part's run timed its shapes in the phases' order (a workload
    part: prefill's, then decode's; a problem file: the call it was extracted from,
    prefill's): a part not timed at a phase's shape counts there as unchanged (its
    speedup at another shape says nothing of a decode step's)."""
    predicted = {}
    for index, profile in enumerate(profiles):
        time_left = 1.0
        for part in parts:
            share = sum(p.share for p in profile.parts if p.key == part.key)
            if part.patched and index < len(part.speedups) and share:
                speedup = part.speedups[index]
                time_left -= share - share / speedup
        predicted[profile.phase] = 1.0 / time_left
    return predicted


def _assemble_and_time(result: Study, target: Target, phases: list[Any], out: Path,
                       instances: dict[str, list[tuple[str, torch.nn.Module]]],
                       crowned: dict[str, Candidate], factory: Factory, options: Options,
                       log: Log, deadline: float) -> None:
    parts = [part for part in result.parts if part.key in crowned]
    if not parts:
        result.notes.append("no part was crowned: the model stays as it was")
        return

    operators: dict[str, OperatorPatch] = {}

    def install(into: Patched, part: PartOutcome) -> None:
        champion = crowned[part.key]
        if part.workload:
            if part.key not in operators:
                operators[part.key] = factory.operator(part, champion)
            into.add_operator(operators[part.key])
        else:
            into.add(champion.sources[champion.entry], instances[part.key])

    kept, checked = [], {}
    for part in parts:  # each alone first: a part wrong only inside the model is named
        alone = Patched(target.module)
        try:
            install(alone, part)
            check = check_end_to_end(target, alone, options.limits,
                                     same_tokens_required=options.precision == "float32")
        except Exception as exc:  # a champion that cannot run inside the model
            part.note = f"dropped: the model with it raises {type(exc).__name__}: {exc}"
            log(f"{part.class_name}: {part.note}")
            continue
        if check.passed:
            kept.append(part)
            checked[part.key] = (alone, check)
        else:
            part.note = f"dropped: the model with it fails the end-to-end check ({check.detail})"
            log(f"{part.class_name}: {part.note}")
    if not kept:
        result.notes.append("every crowned part failed the end-to-end check")
        return
    for part in kept:
        part.patched = True
    if len(kept) == 1:  # the model with its one part was just checked
        patched, result.end_to_end = checked[kept[0].key]
    else:
        patched = Patched(target.module)
        for part in kept:
            install(patched, part)
        result.end_to_end = check_end_to_end(
            target, patched, options.limits,
            same_tokens_required=options.precision == "float32")
    log(f"end to end: {'passed' if result.end_to_end.passed else 'FAILED'}: "
        f"{result.end_to_end.detail}")
    if not result.end_to_end.passed:
        result.notes.append("the parts together fail the end-to-end check: not timed")
        return
    result.exported = str(write_patched(out / "patched", target.description, [{
        "name": Path(part.problem).stem if part.problem else f"{part.workload}-{index}",
        "paths": [path for path, _ in instances[part.key]],
        "champion_source": None if part.workload else crowned[part.key].sources[
            crowned[part.key].entry],
        "package": operators[part.key].directory if part.workload else None,
    } for index, part in enumerate(kept)]))
    log(f"the parts that passed, with apply(model): {result.exported}")
    result.predicted = amdahl(result.profiles, result.parts)
    before, others = patched.calls(), patched.fallbacks()
    # as many rounds as the budget still holds (each round runs every phase twice)
    per_round = 2 * sum(profile.seconds for profile in result.profiles)
    rounds = max(MIN_ROUNDS, min(options.rounds, int(
        (deadline - time.monotonic()) / per_round) - 1 if per_round else options.rounds))
    if rounds < options.rounds:
        result.notes.append(f"timed in {rounds} rounds, not {options.rounds}: the budget "
                            "left no more")
    for phase in phases:
        timing = time_side_by_side(target.module, phase, patched, rounds)
        result.timings.append(timing)
        log(f"{phase.label}: {timing.speedup.median:.2f}x "
            f"[{timing.speedup.low:.2f}, {timing.speedup.high:.2f}]")
    result.champion_calls = patched.calls() - before
    result.fallback_calls = patched.fallbacks() - others
    with patched:  # where the time goes now: the crowned parts run, and take less
        result.after = [profile_phase(target.module, phase, repeats=1) for phase in phases]
