"""The compiled float64 reference is the PyTorch recurrence, only faster."""

from __future__ import annotations

import os
import random

import pytest
import torch

from swarmfab.workloads import Case, Shape, get_workload
from swarmfab.workloads.delta import reference

pytestmark = pytest.mark.skipif(not reference.compiled_reference_available(),
                                reason="no working C compiler: the PyTorch form is used")


def _cases(name: str) -> list[Case]:
    workload = get_workload(name)
    return [*workload.validation_cases(), *workload.fuzz_cases(random.Random(7), 6)]


@pytest.mark.parametrize("name", ["kda", "gdn"])
def test_the_compiled_reference_equals_the_pytorch_recurrence_on_every_case(name: str) -> None:
    workload = get_workload(name)
    for case in _cases(name):
        inputs = workload.make_inputs(case)
        compiled, plain = workload.reference(inputs), workload.reference_torch(inputs)
        for output in ("o", "final_state"):
            assert compiled[output].dtype == torch.float64
            error = (compiled[output] - plain[output]).abs().max()
            assert error <= 1e-12 * max(1.0, float(plain[output].abs().max())), (case.name, output)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 cores: on one, both runs use the same single core")
def test_splitting_the_work_between_threads_changes_no_bit() -> None:
    kda = get_workload("kda")
    inputs = kda.make_inputs(Case("split", Shape(3, 40, 2, 6, 16, 24, initial_state=True), seed=3))
    cores = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cores)})
        alone = kda.reference(inputs)
    finally:
        os.sched_setaffinity(0, cores)
    shared = kda.reference(inputs)
    assert all(torch.equal(alone[n], shared[n]) for n in alone)


def test_without_a_compiler_the_pytorch_form_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    kda = get_workload("kda")
    inputs = kda.make_inputs(Case("fallback", Shape(1, 9, 1, 1, 8, 8), seed=1))
    expected = kda.reference_torch(inputs)
    monkeypatch.setattr(reference, "_function", lambda: None)
    fallback = kda.reference(inputs)
    assert all(torch.equal(fallback[n], expected[n]) for n in expected)


def test_a_shape_the_kernel_cannot_take_is_refused_not_miscomputed() -> None:
    q = torch.zeros(1, 4, 3, 8, dtype=torch.float64)  # H = 3 does not divide HV = 4
    v = torch.zeros(1, 4, 4, 8, dtype=torch.float64)
    g = torch.zeros(1, 4, 4, 8, dtype=torch.float64)
    beta = torch.zeros(1, 4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="refused"):
        reference.recurrent_f64(q, q, v, g, beta, 1.0, None)
