"""Fuzzing draws for the gated delta rule family.

Shapes stay small (the float64 reference is cheap) but cover what breaks kernels: odd
lengths, T = 1, K != V, grouped value heads, an initial state (a third of them in a pool
updated in place, at shuffled slots), strong and weak decay, masked gates, extreme beta
and large values.
"""

from __future__ import annotations

import dataclasses
import random

from swarmfab.workloads._base import Case, Distribution, Shape

__all__ = ["draw_delta_cases"]

_DIMS = (8, 16, 24, 32, 48, 64)


def _draw_shape(rng: random.Random) -> Shape:
    heads, batch = rng.choice((1, 2)), rng.choice((1, 1, 2))
    shape = Shape(
        B=batch,
        T=rng.choice((1, 2, rng.randint(3, 40), rng.randint(41, 200))),
        H=heads,
        HV=heads * rng.choice((1, 1, 2, 4)),
        K=rng.choice(_DIMS),
        V=rng.choice(_DIMS),
        initial_state=rng.random() < 0.5,
    )
    if shape.initial_state and rng.random() < 1 / 3:
        return dataclasses.replace(shape, pool=batch + rng.randint(0, 3))
    return shape


def _draw_distribution(rng: random.Random) -> Distribution:
    return Distribution(
        gate_divisor=rng.choice((0.1, 1.0, 10.0)),
        gate_zero_prob=rng.choice((0.0, 0.0, 0.5)),
        beta=rng.choice(("sigmoid", "sigmoid", "near0", "near1")),
        magnitude=rng.choice((1.0, 1.0, 100.0)),
        scale=rng.choice((None, None, 1.0, 0.1)),
    )


def draw_delta_cases(rng: random.Random, count: int) -> list[Case]:
    """``count`` random cases; names carry their seed so a failure is reproducible."""
    cases = []
    for _ in range(count):
        seed = rng.randrange(2**31)
        local = random.Random(seed)
        cases.append(Case(f"fuzz-{seed}", _draw_shape(local), _draw_distribution(local),
                          seed=seed, origin="fuzz"))
    return cases
