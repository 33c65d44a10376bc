"""What the mutation harness (:mod:`swarmfab.evaluation.adequacy`) mutates and what it
checks a surviving mutant on.

- **Honest kernels.** The delta rule: both C templates at their default knobs, and a
  Python ``forward`` that inlines :func:`swarmfab.workloads.delta.math.chunked` (so its
  arithmetic, not a call into swarmfab, is what the operators rewrite). A problem file:
  the design space's default ``ModelNew`` render, and a plain ``ModelNew`` that runs the
  ``Model``'s own arithmetic eagerly.
- **Beyond the battery.** A mutant that survives both tiers is checked once more against
  the float64 reference on cases past the battery's: longer sequences and tile edges
  the battery does not reach, partial value tiles and keys past the last whole vector,
  moderate decay (a chunk's cumulative decay past exp's floor while a block's span stays
  small), stronger decay with more -inf gates, decode with -inf and zero gates,
  other thread counts and layouts combined with extreme values; for a problem file its
  own sizes with other weights, inputs scaled by 30, 100 and 10,000, all or 99 in 100
  of the inputs exactly zero, in other layouts, weights moved further off their initial
  values. A case outside the operator's domain (the file's own Model fails it) is left
  out, as the battery leaves it out.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

from swarmfab.records import Candidate
from swarmfab.workloads import Case, Dims, Distribution, Shape, Workload, design_space

__all__ = ["BEYOND_ORIGIN", "EQUIVALENT_WHY", "Subject", "beyond_cases", "honest_kernels"]

BEYOND_ORIGIN = "adequacy: beyond the battery"  # not salted: references kept for the run
_SEED = 70_000  # away from the corpus's, fuzzing's and the battery's seeds

# why a mutant of each class can be correct after all (what an equivalent one shows)
EQUIVALENT_WHY: dict[str, str] = {
    "loop-bound": "the bound it changes is never reached at any size tried, or the extra "
                  "or missing iteration writes nothing that is read",
    "dropped-clamp": "the clamp never binds on any input tried: the values it guards stay "
                     "in range without it",
    "missing-max": "every exponent stays within float32's range on the inputs tried",
    "shared-scratch": "no two threads or calls use the shared memory at once",
    "contiguity": "the input is read as it lies, or copied before its storage is read",
    "in-place-update": "the update leaves every value as it was",
    "lower-precision": "the rounded step's error stays far inside the tolerance",
    "lazy-result": "the wrapped value is not a tensor the caller receives",
    "special-values": "the values it special-cases change the result by less than the "
                      "tolerance",
    "index-stride": "the two indexings coincide at every shape tried",
    "sign-flip": "the term whose sign flips is zero or never read",
    "constant": "the constant's change stays within the tolerance, or it is not used at "
                "these knobs",
    "dropped-term": "the term it drops is zero, or never read",
}

_PLAIN_MODEL_NEW = '''

# ----------------------------------------------------------------------------------
# ModelNew: the Model above, its own arithmetic, eagerly
# ----------------------------------------------------------------------------------
class ModelNew(Model):
    def forward(self, *inputs):
        return super().forward(*inputs)
'''

_DELTA_FORWARD = '''

def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
'''


@dataclass(frozen=True, slots=True)
class Subject:
    """A kernel the operators are applied to: an honest one, or a stored champion."""

    label: str
    candidate: Candidate


def honest_kernels(workload: Workload, name: str, threads: int) -> list[Subject]:
    """The honest kernels of ``workload`` (given as ``name``: a built-in's name or a
    problem file's path), built for ``threads`` threads."""
    space = design_space(name)
    default = space.instantiate(space.default(), threads=threads, agent="adequacy")
    if workload.python_backend == "torch-module":
        source = workload.source  # type: ignore[attr-defined]
        plain = Candidate(default.workload, "torch-module",
                          {"model_new.py": source.rstrip("\n") + "\n" + _PLAIN_MODEL_NEW},
                          "model_new.py", agent="adequacy")
        return [Subject("ModelNew, the design space's default render", default),
                Subject("ModelNew, the Model's arithmetic eagerly", plain)]
    subjects = [Subject(f"C {default.knobs.get('algorithm', 'default')} template, default "
                        "knobs", default)]
    if "algorithm" in space.default():
        other = {**space.default(), "algorithm": "recurrent"}
        if other != space.default():
            subjects.append(Subject("C recurrent template, default knobs",
                                    space.instantiate(other, threads=threads,
                                                      agent="adequacy")))
    if name == "kda":
        subjects.append(Subject("Python forward, delta.math.chunked inlined",
                                Candidate(default.workload, "python",
                                          {"chunked_forward.py": _delta_forward_source()},
                                          "chunked_forward.py", agent="adequacy")))
    return subjects


def _delta_forward_source() -> str:
    from swarmfab.workloads.delta import math as delta_math

    functions = (delta_math.expand_heads, delta_math.chunked, delta_math._intra_chunk_scores)
    header = ('"""The gated delta rule\'s chunked WY/UT form, as swarmfab.workloads.delta.math '
              'has it."""\n\nfrom __future__ import annotations\n\nimport torch\n\n'
              f"GATE_FLOOR = {delta_math.GATE_FLOOR!r}\n\n\n")
    return header + "\n\n".join(inspect.getsource(f) for f in functions) + _DELTA_FORWARD


def beyond_cases(workload: Workload, threads: int) -> list[Case]:
    """Cases past the battery's (see the module's documentation), before the domain
    check; their seeds replay exactly (:data:`BEYOND_ORIGIN`)."""
    if workload.family == "delta-rule":
        cases = _delta_beyond(threads)
    else:
        cases = _problem_beyond(workload, threads)
    return [dataclasses.replace(case, origin=BEYOND_ORIGIN, seed=_SEED + number)
            for number, case in enumerate(cases)]


def _shape(B: int, T: int, H: int, HV: int, K: int = 128, V: int = 128,
           initial_state: bool = True, pool: int = 0) -> Shape:
    return Shape(B=B, T=T, H=H, HV=HV, K=K, V=V, initial_state=initial_state, pool=pool)


def _delta_beyond(threads: int) -> list[Case]:
    two = min(2, threads) if threads else 2
    return [
        Case("beyond: prefill T2053 B2 H2/HV8 K128", _shape(2, 2053, 2, 8)),
        Case("beyond: tile edge T129, B3 H1/HV2", _shape(3, 129, 1, 2)),
        Case("beyond: tile edge T65, B2 H2", _shape(2, 65, 2, 2)),
        Case("beyond: K96 V80 (partial tiles) T333 H3/HV6", _shape(2, 333, 3, 6, K=96, V=80)),
        Case("beyond: K100 V72 (keys past the last whole vector) T97 H1/HV2",
             _shape(2, 97, 1, 2, K=100, V=72)),
        Case("beyond: strong decay, a fifth of the gates -inf", _shape(2, 500, 2, 4),
             Distribution(gate_divisor=0.05, gate_fill="-inf", gate_fill_prob=0.2)),
        Case("beyond: moderate decay (g / 0.5): a chunk decays past exp's floor, a block "
             "does not", _shape(2, 300, 2, 8), Distribution(gate_divisor=0.5)),
        Case("beyond: moderate decay (g / 0.6)", _shape(2, 300, 2, 8),
             Distribution(gate_divisor=0.6)),
        Case("beyond: decode in place, a tenth of the gates -inf", _shape(64, 1, 2, 4, pool=80),
             Distribution(gate_fill="-inf", gate_fill_prob=0.1)),
        Case("beyond: decode, gates exactly 0, beta exactly 1", _shape(32, 1, 2, 4),
             Distribution(gate_fill="0", beta_fill=1.0)),
        Case("beyond: gates 0 over 2048 tokens, values x1000", _shape(1, 2048, 1, 2),
             Distribution(gate_fill="0", magnitude=1e3)),
        Case("beyond: beta near 1, half the gates -100", _shape(2, 300, 2, 4),
             Distribution(beta="near1", gate_fill="-100", gate_fill_prob=0.5)),
        Case("beyond: beta near 0, scale 1", _shape(2, 300, 4, 4),
             Distribution(beta="near0", scale=1.0)),
        Case("beyond: decode in place, 512 pairs, strided", _shape(128, 1, 2, 4, pool=200),
             layout="strided"),
        Case("beyond: 64 pairs on 1 thread, column-major", _shape(4, 300, 4, 16),
             layout="transposed", threads=1),
        Case("beyond: 100 pairs on 2 threads, T130 K64", _shape(25, 130, 2, 4, K=64, V=64),
             threads=two),
        Case("beyond: no initial state, T777 H4", _shape(1, 777, 4, 4, initial_state=False)),
    ]


def _problem_beyond(workload: Workload, threads: int) -> list[Case]:
    battery = workload.battery_cases(threads)
    full, small = battery[0].shape, battery[1].shape
    cases = [
        Case("beyond: the file's sizes, other weights and inputs", full),
        Case("beyond: the file's sizes, strided, 1 thread", full, layout="strided", threads=1),
        Case("beyond: inputs scaled by 30", small, Distribution(input_scale=30.0)),
        Case("beyond: inputs scaled by 100, column-major", small,
             Distribution(input_scale=100.0), layout="transposed"),
        Case("beyond: inputs scaled by 10,000", small, Distribution(input_scale=1e4)),
        Case("beyond: every input exactly 0, column-major, 1 thread", small,
             Distribution(zero_prob=1.0), layout="transposed", threads=1),
        Case("beyond: 99 in 100 inputs 0, strided", small,
             Distribution(zero_prob=0.99), layout="strided"),
    ]
    odd = _odd_sizes(workload, small)
    if odd is not None:
        cases.append(Case(f"beyond: odd sizes ({odd.label})", odd))
    # weights moved further off their initial values than the battery's
    return [dataclasses.replace(case, distribution=dataclasses.replace(
        case.distribution, weight_noise=0.3)) for case in cases]


def _odd_sizes(workload: Workload, small: object) -> Dims | None:
    """The small sizes, each one more than three quarters of itself (no power of two),
    where the problem runs there."""
    runs_at = getattr(workload, "runs_at", None)
    if not isinstance(small, Dims) or runs_at is None:
        return None
    odd = Dims(tuple((name, size * 3 // 4 + 1) for name, size in small.sizes))
    return odd if runs_at(odd) else None
