"""Crowned parts put back into the model, checked end to end, and timed side by side.

Each crowned part is a ``ModelNew`` file (the problem's source and its fast path). Every
instance of the part in the model gets a ``ModelNew`` of its own, loaded with that
instance's weights (strictly: a champion whose parameters do not line up is refused),
and takes the instance's place. :class:`Patched` swaps them in and out, so the original
and the patched model are timed in alternating rounds of one process.

The end-to-end check compares the patched model with the original on several prompts:
logits within the tolerance (RMS error ratio and max-abs ratio, as the verifier reads
them), and, for a language model, the same greedy tokens where every part keeps float32
(parts in bfloat16 are judged on the logits alone).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmfab.measure.stats import median_ci, paired_ratio
from swarmfab.model.calls import flatten, rebuild
from swarmfab.model.target import Phase, Target
from swarmfab.records import Estimate
from swarmfab.verify import compare_outputs
from swarmfab.workloads import Tolerances

__all__ = ["EndToEnd", "OperatorPatch", "Patched", "PhaseTiming", "check_end_to_end",
           "time_side_by_side"]


class Crowned(torch.nn.Module):
    """A crowned part: its champion in an instance's place. A call of the form the
    problem file recorded (its ``CALL``) goes to the champion, flattened, and its result
    is rebuilt; any other (a decode step with a cache object) goes to the original."""

    def __init__(self, champion: torch.nn.Module, original: torch.nn.Module,
                 call: dict[str, Any] | None):
        super().__init__()
        self.champion = champion
        self._original = [original]  # a list: not registered as a submodule
        self.call = call
        self.calls = 0      # shows the champion really runs inside the model
        self.fallbacks = 0  # calls of another form, run by the original

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.call is None:
            flat = None if kwargs else list(args)
        else:
            flat = flatten(self.call, args, kwargs)
        if flat is None:
            self.fallbacks += 1
            return self._original[0](*args, **kwargs)
        self.calls += 1
        result = self.champion(*flat)
        return result if self.call is None else rebuild(self.call["output"], result)


@dataclass(frozen=True)
class OperatorPatch:
    """An exported operator put where the model's library calls it (the delta rule's
    package: ``patch_transformers``, ``unpatch``, and its count of calls)."""

    patch: Callable[[], Any]
    unpatch: Callable[[], Any]
    calls: Callable[[], int]
    directory: str = ""  # the package's, where it was written

    @classmethod
    def of(cls, package: Any) -> OperatorPatch:
        """An exported package's patch (an imported module with ``patch_transformers``,
        ``unpatch`` and ``calls``)."""
        return cls(package.patch_transformers, package.unpatch,
                   lambda: sum(package.calls.values()),
                   str(Path(package.__file__).parent))


class Patched:
    """Champions swapped into a model's parts (and exported operators patched in), and
    out again."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self._swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, Crowned]] = []
        self._operators: list[OperatorPatch] = []

    def add_operator(self, operator: OperatorPatch) -> None:
        self._operators.append(operator)

    def add_operator_package(self, package: Any) -> None:
        self.add_operator(OperatorPatch.of(package))

    def add(self, source: str, instances: Sequence[tuple[str, torch.nn.Module]]) -> None:
        """A champion's file (``source``: the problem and ``class ModelNew``) for every
        instance at ``instances`` (path, module)."""
        namespace: dict[str, Any] = {"__name__": "swarmfab_champion"}
        exec(compile(source, "<champion>", "exec"), namespace)
        champion_class = namespace["ModelNew"]
        init = namespace["get_init_inputs"]()
        for path, original in instances:
            champion = champion_class(*init)
            champion.eval()
            champion.part.load_state_dict(original.state_dict(), strict=True)
            parent_path, _, name = path.rpartition(".")
            parent = self.model.get_submodule(parent_path) if parent_path else self.model
            self._swaps.append((parent, name, original,
                                Crowned(champion, original, namespace.get("CALL"))))

    def __enter__(self) -> Patched:
        for parent, name, _, swapped in self._swaps:
            setattr(parent, name, swapped)
        for operator in self._operators:
            operator.patch()
        return self

    def __exit__(self, *exc: object) -> None:
        for parent, name, original, _ in self._swaps:
            setattr(parent, name, original)
        for operator in self._operators:
            operator.unpatch()

    def __len__(self) -> int:
        return len(self._swaps) + len(self._operators)

    def fallbacks(self) -> int:
        """Calls of another form than the one extracted, run by the original parts."""
        return sum(swapped.fallbacks for *_, swapped in self._swaps)

    def calls(self) -> int:
        """The champions' calls so far, over every instance and operator."""
        return sum(swapped.calls for *_, swapped in self._swaps) + sum(
            operator.calls() for operator in self._operators)


@dataclass(frozen=True)
class EndToEnd:
    """The patched model against the original."""

    passed: bool
    prompts: int
    rms_ratio: float      # worst over the prompts
    max_abs_ratio: float  # worst over the prompts
    tokens_match: bool | None  # None: not a language model
    detail: str


def _ratios(got: torch.Tensor, expected: torch.Tensor, tolerances: Tolerances
            ) -> tuple[float, float]:
    """The verifier's two error ratios of the patched model's output against the
    original's (infinite where it is not a finite tensor of that shape and dtype)."""
    [check] = compare_outputs("end to end", {"out": got}, {"out": expected.double()},
                              tolerances, {"out": expected.dtype})
    if check.rms_ratio is None or check.max_abs_ratio is None:
        return math.inf, math.inf
    return check.rms_ratio, check.max_abs_ratio


def check_end_to_end(target: Target, patched: Patched, tolerances: Tolerances, *,
                     same_tokens_required: bool = True, prompts: int = 3, tokens: int = 64,
                     new_tokens: int = 8, seed: int = 1) -> EndToEnd:
    """Logits (or a factory module's outputs) and greedy tokens, patched against the
    original, on ``prompts`` inputs other than the profiled ones. Each decode step's
    logits are compared up to the first step whose token differs (after it, the two
    models continue different texts); ``same_tokens_required=False`` (parts in reduced
    precision, judged on their logits alone) lets the tokens differ."""
    model = target.module
    generator = torch.Generator().manual_seed(seed)
    worst_rms, worst_abs, same_tokens = 0.0, 0.0, True
    calls: list[Callable[[], Any]] = []
    if target.causal_lm:
        low = min(3, target.vocab_size - 1)
        for index in range(prompts):
            length = max(2, tokens - 7 * index)  # other lengths than the profile's
            ids = torch.randint(low, target.vocab_size, (1, length), generator=generator)
            calls.append(functools.partial(_logits, model, ids))
    else:
        calls.append(lambda: model(*target.example))
    with torch.no_grad():
        for call in calls:
            expected = _tensor_of(call())
            with patched:
                got = _tensor_of(call())
            rms, peak = _ratios(got, expected, tolerances)
            worst_rms, worst_abs = max(worst_rms, rms), max(worst_abs, peak)
        if target.causal_lm:
            prompt = torch.randint(min(3, target.vocab_size - 1), target.vocab_size,
                                   (2, 16), generator=generator)
            greedy = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, attention_mask=torch.ones_like(prompt),
                          pad_token_id=0, return_dict_in_generate=True, output_logits=True)
            generate: Any = model.generate  # a transformers model's
            expected = generate(prompt, **greedy)
            with patched:
                got = generate(prompt, **greedy)
            same_tokens = bool(torch.equal(expected.sequences, got.sequences))
            # every decode step's logits too (a part wrong only one token at a time), up
            # to the first step whose token differs: after it the contexts differ
            differs = (expected.sequences != got.sequences)[:, prompt.shape[1]:].any(dim=0)
            shared = int(differs.nonzero()[0]) + 1 if differs.any() else len(expected.logits)
            for step_expected, step_got in zip(expected.logits[:shared], got.logits[:shared],
                                               strict=True):
                rms, peak = _ratios(step_got, step_expected, tolerances)
                worst_rms, worst_abs = max(worst_rms, rms), max(worst_abs, peak)
    within = worst_rms <= tolerances.rms_ratio and worst_abs <= tolerances.max_abs_ratio
    passed = within and (same_tokens or not same_tokens_required)
    steps = f" and {new_tokens} decode steps of 2 prompts" if target.causal_lm else ""
    detail = (f"outputs on {len(calls)} input(s){steps}: rms ratio {worst_rms:.2e} (limit "
              f"{tolerances.rms_ratio:.0e}), max-abs ratio {worst_abs:.2e} (limit "
              f"{tolerances.max_abs_ratio:.0e})")
    if target.causal_lm:
        detail += "; greedy tokens " + ("identical" if same_tokens else "differ")
        if not same_tokens_required:
            detail += " (not required: parts in reduced precision are judged on logits)"
    return EndToEnd(passed, len(calls), worst_rms, worst_abs,
                    same_tokens if target.causal_lm else None, detail)


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> Any:
    return model(input_ids=ids, use_cache=False).logits


def _tensor_of(result: Any) -> torch.Tensor:
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, Sequence) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    logits = getattr(result, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise TypeError(f"cannot compare a {type(result).__name__}: return a tensor")


@dataclass(frozen=True)
class PhaseTiming:
    """One phase, original and patched, timed in alternating rounds."""

    phase: str
    label: str
    original: Estimate  # seconds per run of the phase
    patched: Estimate
    speedup: Estimate   # paired: original / patched per round
    rounds: int


def time_side_by_side(model: torch.nn.Module, phase: Phase, patched: Patched,
                      rounds: int = 7) -> PhaseTiming:
    """``phase`` without and with the champions, ``rounds`` pairs, the order flipping
    each round so a slow spell on a shared host touches both."""
    phase.call(model)
    with patched:
        phase.call(model)  # warm: the champions' first calls compile
    original: list[float] = []
    faster: list[float] = []
    for round_ in range(rounds):
        for swapped in ((False, True) if round_ % 2 == 0 else (True, False)):
            began = time.perf_counter()
            if swapped:
                with patched:
                    phase.call(model)
            else:
                phase.call(model)
            (faster if swapped else original).append(time.perf_counter() - began)
    return PhaseTiming(phase.name, phase.label, median_ci(original), median_ci(faster),
                       paired_ratio(original, faster), rounds)
