"""Where a model's time goes: by part (a block of its layers) and by operator.

A *part* is a module worth working on as a whole: each child of a repeated layer (the
elements of the model's longest ``ModuleList``: attention, MLP, norms) and every module
outside the layers that holds parameters of its own (embeddings, the final norm, the
head). Instances with the same class and parameter shapes are one part: one problem
file, one champion, swapped into every instance.

Each phase runs once to warm up, then ``repeats`` times (more for a short phase: at
least :data:`MIN_PROFILED_S` of runs, at most :data:`MAX_REPEATS`) with forward hooks
timing every part's calls (inclusive wall time, the hooks' own cost included in the
phase's total), and once under the PyTorch profiler for the operator table. A part's
share is its time over the phase's in the fastest run, the one least disturbed by other
processes: a phase of a millisecond that the scheduler interrupts loses a time slice of
several, inside a part or between parts, and one such run would move every share. What
no part covers is the rest (glue, sampling, Python).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from swarmfab.model.target import Phase

SLOW_PHASE_S = 1.0  # a phase whose warm run took longer is profiled once
MIN_PROFILED_S = 0.05  # a shorter phase runs more often, to find an undisturbed run
MAX_REPEATS = 25

__all__ = ["ArgumentSpec", "OperatorTime", "PartProfile", "PhaseProfile", "find_parts",
           "profile_phase"]


@dataclass(frozen=True)
class ArgumentSpec:
    """One argument (or result) of a part's call as recorded: a tensor's shape and dtype
    (and, for an integer tensor, one past its largest value), a plain value, a tuple of
    those (``items``), or something else (its type's name)."""

    kind: str  # "tensor", "value", "tuple", "other"
    shape: tuple[int, ...] = ()
    dtype: str = ""
    bound: int = 0
    value: Any = None
    type_name: str = ""
    items: tuple[ArgumentSpec, ...] = ()

    @classmethod
    def of(cls, value: Any) -> ArgumentSpec:
        if isinstance(value, torch.Tensor):
            bound = int(value.max()) + 1 if (value.numel() and not value.is_floating_point()
                                             and value.dtype != torch.bool) else 0
            return cls("tensor", tuple(value.shape), str(value.dtype).removeprefix("torch."),
                       bound)
        if value is None or isinstance(value, bool | int | float | str):
            return cls("value", value=value)
        if isinstance(value, tuple | list) and value and all(
                v is None or isinstance(v, torch.Tensor) for v in value):
            return cls("tuple", items=tuple(cls.of(v) for v in value))
        return cls("other", type_name=type(value).__name__)


@dataclass
class PartProfile:
    """One part in one phase: its instances, calls, time, and a recorded call."""

    key: str
    class_name: str
    paths: list[str]
    calls: int = 0
    seconds: float = 0.0
    share: float = 0.0
    args: tuple[ArgumentSpec, ...] = ()
    kwargs: dict[str, ArgumentSpec] = field(default_factory=dict)
    output: ArgumentSpec | None = None  # what the recorded call returned


@dataclass(frozen=True)
class OperatorTime:
    name: str
    calls: int
    self_seconds: float
    share: float


@dataclass
class PhaseProfile:
    phase: str
    label: str
    seconds: float  # one run of the phase, median over the repeats
    parts: list[PartProfile]
    operators: list[OperatorTime]

    @property
    def covered(self) -> float:
        return sum(part.share for part in self.parts)


def find_parts(model: torch.nn.Module) -> dict[str, list[tuple[str, torch.nn.Module]]]:
    """The model's parts by key (class and parameter shapes): each its instances' paths
    and modules, in the model's order."""
    named = dict(model.named_modules())
    lists = [(path, module) for path, module in named.items()
             if isinstance(module, torch.nn.ModuleList) and len(module) > 0]
    chosen: list[tuple[str, torch.nn.Module]] = []
    if lists:
        layers_path, layers = max(lists, key=lambda item: len(item[1]))
        prefix = f"{layers_path}."
        for index, layer in enumerate(layers):
            chosen += [(f"{prefix}{index}.{name}", child)
                       for name, child in layer.named_children()]
        for path, module in named.items():
            inside = path == layers_path or path.startswith(prefix)
            if path and not inside and _owns_parameters(module) and \
                    not any(path.startswith(f"{p}.") for p, _ in chosen):
                chosen.append((path, module))
    else:
        chosen = list(model.named_children()) or [("", model)]
    parts: dict[str, list[tuple[str, torch.nn.Module]]] = defaultdict(list)
    for path, module in chosen:
        parts[part_key(module)].append((path, module))
    return dict(parts)


def part_key(module: torch.nn.Module) -> str:
    shapes = ",".join(f"{name}{list(p.shape)}" for name, p in module.named_parameters())
    return f"{type(module).__module__}.{type(module).__qualname__}({shapes})"


def _owns_parameters(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False))


def profile_phase(model: torch.nn.Module, phase: Phase, repeats: int = 3,
                  top_operators: int = 12) -> PhaseProfile:
    """``phase`` on ``model``: each part's time and share, and the operators' self time."""
    parts = find_parts(model)
    began = time.perf_counter()
    phase.call(model)  # warm: first-call allocations, lazy initialisation
    warm = time.perf_counter() - began
    if warm > SLOW_PHASE_S:
        repeats = 1  # a slow phase's shares are steady over one run
    elif warm * repeats < MIN_PROFILED_S:
        repeats = min(MAX_REPEATS, max(repeats, math.ceil(MIN_PROFILED_S / max(warm, 1e-6))))
    profiles = {key: PartProfile(key, type(instances[0][1]).__name__,
                                 [path for path, _ in instances])
                for key, instances in parts.items()}
    spent: dict[str, float] = defaultdict(float)
    started: dict[int, list[float]] = defaultdict(list)
    handles = []
    for key, instances in parts.items():
        for _, module in instances:
            handles.append(module.register_forward_pre_hook(
                _before(profiles[key], started), with_kwargs=True))
            handles.append(module.register_forward_hook(
                _after(profiles[key], started, spent)))
    runs: list[tuple[float, dict[str, float]]] = []  # each run's wall time and parts' times
    try:
        for _ in range(repeats):
            spent.clear()
            began = time.perf_counter()
            phase.call(model)
            runs.append((time.perf_counter() - began, dict(spent)))
    finally:
        for handle in handles:
            handle.remove()
    fastest, times = min(runs, key=lambda run: run[0])
    for key, profile in profiles.items():
        profile.seconds = times.get(key, 0.0)
        profile.calls //= repeats
        profile.share = profile.seconds / fastest if fastest else 0.0
    walls = sorted(wall for wall, _ in runs)
    ordered = sorted(profiles.values(), key=lambda p: -p.seconds)
    return PhaseProfile(phase.name, phase.label, walls[len(walls) // 2], ordered,
                        _operators(model, phase, top_operators))


def _before(profile: PartProfile, started: dict[int, list[float]]) -> Any:
    def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        profile.calls += 1
        if not profile.args and not profile.kwargs:  # the first call, as recorded
            profile.args = tuple(ArgumentSpec.of(arg) for arg in args)
            profile.kwargs = {name: ArgumentSpec.of(value) for name, value in kwargs.items()}
        started[id(module)].append(time.perf_counter())
    return hook


def _after(profile: PartProfile, started: dict[int, list[float]],
           spent: dict[str, float]) -> Any:
    def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
        stack = started[id(module)]
        if stack:
            spent[profile.key] += time.perf_counter() - stack.pop()
        if profile.output is None:
            profile.output = ArgumentSpec.of(output)
    return hook


def _operators(model: torch.nn.Module, phase: Phase, top: int) -> list[OperatorTime]:
    """The operators' self CPU time over one run of the phase, largest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as recorded:
        phase.call(model)
    events = [event for event in recorded.key_averages() if event.key.startswith("aten::")]
    total = sum(event.self_cpu_time_total for event in events) or 1.0
    events.sort(key=lambda event: -event.self_cpu_time_total)
    return [OperatorTime(event.key, int(event.count), event.self_cpu_time_total / 1e6,
                         event.self_cpu_time_total / total) for event in events[:top]]


def merged_share(profiles: Sequence[PhaseProfile]) -> dict[str, float]:
    """Each part's share averaged over the phases (each phase weighs the same)."""
    shares: dict[str, float] = defaultdict(float)
    for profile in profiles:
        for part in profile.parts:
            shares[part.key] += part.share / len(profiles)
    return dict(shares)
