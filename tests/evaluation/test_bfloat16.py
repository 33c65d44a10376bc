"""A bfloat16 goal: q, k, v and beta come in bfloat16, as fla's users pass them, while the
gate and the state stay float32. References are of the very bfloat16 inputs; o must come
back in bfloat16 and the state in float32; the bfloat16 tolerances apply."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.evaluation._bound import compulsory_bytes
from swarmfab.measure import TimingPolicy
from swarmfab.records import Candidate, Status
from swarmfab.sandbox import Limits
from swarmfab.verify import compare_outputs
from swarmfab.workloads import DTYPES, Case, Shape, get_workload

QUICK = TimingPolicy(min_rounds=3, max_rounds=6, max_seconds=1.0)
SHAPE = Shape(1, 64, 2, 2, 32, 32, initial_state=True)

# the torch baseline's float32 arithmetic, answered in float32 whatever v came in
ANSWERS_IN_FLOAT32 = '''
from swarmfab.workloads import get_workload

_BASELINE = get_workload("kda").baselines()["torch-recurrent"]


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    o, state = _BASELINE(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state)
    return o.float(), state
'''


def _evaluator(tmp_path: Path) -> Evaluator:
    kda = get_workload("kda")
    return Evaluator(kda, [SHAPE], tmp_path / "cache", threads=1,
                     tolerances=kda.tolerances(torch.bfloat16), limits=Limits(wall_s=120),
                     policy=QUICK, dtype="bfloat16")


def test_a_bfloat16_case_draws_bfloat16_inputs_and_a_float32_gate_and_state() -> None:
    kda = get_workload("kda")
    case = Case("c", Shape(1, 16, 2, 2, 16, 16, initial_state=True), seed=3, dtype="bfloat16")
    inputs = kda.make_inputs(case)
    assert {name: inputs[name].dtype for name in ("q", "k", "v", "beta")} == dict.fromkeys(
        ("q", "k", "v", "beta"), torch.bfloat16)
    assert inputs["g"].dtype == inputs["initial_state"].dtype == torch.float32
    # the reference is of the values given: the same values in float32 give the same one
    widened = {name: value.float() if isinstance(value, torch.Tensor) else value
               for name, value in inputs.items()}
    assert torch.equal(kda.reference(inputs)["o"], kda.reference(widened)["o"])
    # and not of the float32 draw they were rounded from
    assert not torch.equal(kda.reference(inputs)["o"],
                           kda.reference(kda.make_inputs(case.in_dtype("float32")))["o"])
    assert Case.from_dict(case.to_dict()) == case and case.twin().dtype == "bfloat16"
    with pytest.raises(KeyError, match="float16"):
        Case.from_dict({**case.to_dict(), "dtype": "float16"})


def test_bfloat16_inputs_move_half_the_bytes_of_the_tokens_but_not_of_the_state() -> None:
    kda = get_workload("kda")
    decode = Shape(64, 1, 16, 16, 128, 128, initial_state=True)
    state = 4 * 64 * 16 * 128 * 128 * 2
    tokens32 = compulsory_bytes(kda, decode) - state
    tokens16 = compulsory_bytes(kda, decode, "bfloat16") - state
    gate = 4 * 64 * 16 * 128
    assert tokens16 - gate == pytest.approx((tokens32 - gate) / 2)


def test_an_output_in_another_dtype_fails_and_names_both() -> None:
    reference = {"o": torch.zeros(2, dtype=torch.float64)}
    outputs = {"o": torch.zeros(2, dtype=torch.float32)}
    tolerances = get_workload("kda").tolerances(torch.bfloat16)
    [check] = compare_outputs("c", outputs, reference, tolerances, {"o": torch.bfloat16})
    assert not check.passed and check.detail == "o: dtype torch.float32, expected bfloat16"
    [check] = compare_outputs("c", {"o": outputs["o"].to(DTYPES["bfloat16"])}, reference,
                              tolerances, {"o": torch.bfloat16})
    assert check.passed


def test_a_candidate_answering_in_float32_fails_a_bfloat16_goal(tmp_path: Path) -> None:
    candidate = Candidate("kda", "python", {"answers.py": ANSWERS_IN_FLOAT32}, "answers.py")
    verdict = _evaluator(tmp_path).verify(candidate)
    assert verdict.status is Status.REJECTED
    assert "o: dtype torch.float32, expected bfloat16" in verdict.reason


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_bfloat16_goal_verifies_and_times_the_c_kernel_against_the_baseline(
        tmp_path: Path, template: Candidate) -> None:
    """The C kernels compute in float32 from bfloat16 inputs (widened by the glue) and
    answer o in bfloat16: rounded beyond the float32 tolerance, within the bfloat16 one."""
    evaluator = _evaluator(tmp_path)
    evaluator.prepare()
    incumbent = Implementation("torch-recurrent", baseline="torch-recurrent")
    verdict = evaluator.evaluate(template, {SHAPE.label: incumbent})
    assert verdict.status is Status.ACCEPTED, verdict.reason
    errors = [check.rms_ratio for check in verdict.checks
              if check.check == "o matches reference" and check.rms_ratio is not None]
    assert errors and 1e-4 < max(errors) < 5e-3
    [timing] = verdict.timings
    assert timing.ratio.median < 1  # many times faster than torch's per-token loop


def test_a_runs_closing_table_says_its_inputs_were_bfloat16() -> None:
    from swarmfab.report.console import run_table

    assert str(run_table({"dtype": "bfloat16", "shapes": []}).title).endswith(
        "(measured side by side, inputs in bfloat16)")
    assert str(run_table({"shapes": []}).title).endswith("(measured side by side)")
