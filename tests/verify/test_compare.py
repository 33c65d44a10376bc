"""compare_outputs: the numerical acceptance rule against the float64 reference."""

from __future__ import annotations

import math

import torch

from swarmfab.verify import compare_outputs
from swarmfab.workloads import Tolerances

TOL = Tolerances(rms_ratio=1e-4, max_abs_ratio=1e-3)


def _reference(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_honest_outputs_pass_every_check() -> None:
    ref = {"o": _reference(2, 8, 4), "final_state": _reference(2, 4, 4, seed=1)}
    got = {name: value.float() for name, value in ref.items()}
    checks = compare_outputs("case-a", got, ref, TOL)
    assert [c.check for c in checks] == ["o matches reference", "final_state matches reference"]
    assert all(c.passed for c in checks)
    assert all(c.case == "case-a" for c in checks)
    assert all(c.rms_ratio is not None and c.rms_ratio < 1e-6 for c in checks)


def test_nan_is_rejected_with_a_message_naming_non_finite_elements() -> None:
    ref = {"o": _reference(3, 5)}
    got = {"o": ref["o"].float().clone()}
    got["o"][1, 2] = math.nan
    (check,) = compare_outputs("c", got, ref, TOL)
    assert not check.passed
    assert "non-finite" in check.detail
    assert "1 non-finite" in check.detail
    assert "(1, 2)" in check.detail  # first bad index


def test_inf_is_rejected() -> None:
    ref = {"o": _reference(4)}
    got = {"o": ref["o"].float().clone()}
    got["o"][0] = math.inf
    (check,) = compare_outputs("c", got, ref, TOL)
    assert not check.passed
    assert "non-finite" in check.detail


def test_wrong_shape_is_rejected() -> None:
    ref = {"o": _reference(2, 3)}
    (check,) = compare_outputs("c", {"o": ref["o"].float().T.contiguous()}, ref, TOL)
    assert not check.passed
    assert "shape" in check.detail
    assert "(3, 2)" in check.detail and "(2, 3)" in check.detail


def test_wrong_dtype_and_missing_outputs_are_rejected() -> None:
    ref = {"o": _reference(4), "final_state": _reference(2)}
    checks = compare_outputs("c", {"o": ref["o"].clone()}, ref, TOL)  # float64, no state
    assert [c.passed for c in checks] == [False, False]
    assert "dtype" in checks[0].detail
    assert "missing" in checks[1].detail


def test_single_corrupted_element_fails_max_abs_even_when_rms_passes() -> None:
    ref = {"o": _reference(100_000)}
    got = {"o": ref["o"].float().clone()}
    got["o"][12_345] += 5e-3 * float(ref["o"].abs().max())
    (check,) = compare_outputs("c", got, ref, TOL)
    assert check.rms_ratio is not None and check.max_abs_ratio is not None
    assert check.rms_ratio <= TOL.rms_ratio  # the RMS dilutes the single error...
    assert check.max_abs_ratio > TOL.max_abs_ratio  # ...the max-abs check does not
    assert not check.passed


def test_uniform_error_above_rms_limit_fails() -> None:
    ref = {"o": _reference(1000)}
    (check,) = compare_outputs("c", {"o": (ref["o"] * (1 + 1e-3)).float()}, ref, TOL)
    assert not check.passed
    assert check.rms_ratio is not None and check.rms_ratio > TOL.rms_ratio


def test_every_output_is_checked_even_after_a_failure() -> None:
    ref = {"o": _reference(4), "final_state": _reference(4, seed=2)}
    got = {"o": torch.full((4,), math.nan), "final_state": ref["final_state"].float()}
    checks = compare_outputs("c", got, ref, TOL)
    assert [c.passed for c in checks] == [False, True]
