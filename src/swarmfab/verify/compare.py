"""Numerical comparison of candidate outputs against the float64 reference.

Two figures per output, both relative so they mean the same at any magnitude:
``rms(out - ref) / rms(ref)`` (the overall error) and ``max|out - ref| / max|ref|`` (a
localised error that the RMS would dilute). Any NaN or Inf fails outright, as does a
wrong shape or dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from swarmfab.records import CheckResult
from swarmfab.workloads import Outputs, Tolerances

__all__ = ["compare_outputs"]


def compare_outputs(
    case: str, outputs: Outputs, reference: Outputs, tolerances: Tolerances,
    dtypes: Mapping[str, torch.dtype] | None = None,
) -> list[CheckResult]:
    """One check per reference output; stops at nothing, so every failure is reported.
    ``dtypes``: what each output must come back in (float32 where not named)."""
    dtypes = dtypes or {}
    return [
        _compare_one(case, name, outputs.get(name), expected, tolerances,
                     dtypes.get(name, torch.float32))
        for name, expected in reference.items()
    ]


def _compare_one(
    case: str, name: str, got: torch.Tensor | None, expected: torch.Tensor, tol: Tolerances,
    dtype: torch.dtype,
) -> CheckResult:
    check = f"{name} matches reference"
    if not isinstance(got, torch.Tensor):
        return CheckResult(case, check, False, f"{name}: missing (got {type(got).__name__})")
    if tuple(got.shape) != tuple(expected.shape):
        detail = f"{name}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        return CheckResult(case, check, False, detail)
    if got.dtype != dtype:
        expected_name = str(dtype).removeprefix("torch.")
        return CheckResult(case, check, False,
                           f"{name}: dtype {got.dtype}, expected {expected_name}")
    got64 = got.detach().to(torch.float64)
    finite = torch.isfinite(got64)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        first = tuple(int(i) for i in (~finite).nonzero()[0])
        detail = f"{name}: {bad} non-finite element(s) (NaN/Inf), first at index {first}"
        return CheckResult(case, check, False, detail)
    error = got64 - expected
    ref_rms = float(expected.square().mean().sqrt())
    ref_max = float(expected.abs().max()) if expected.numel() else 0.0
    rms_ratio = float(error.square().mean().sqrt()) / max(ref_rms, 1e-30)
    max_abs_ratio = float(error.abs().max()) / max(ref_max, 1e-30) if error.numel() else 0.0
    passed = rms_ratio <= tol.rms_ratio and max_abs_ratio <= tol.max_abs_ratio
    detail = (
        f"{name}: rms ratio {rms_ratio:.2e} (limit {tol.rms_ratio:.0e}), "
        f"max-abs ratio {max_abs_ratio:.2e} (limit {tol.max_abs_ratio:.0e})"
    )
    return CheckResult(case, check, passed, detail, rms_ratio, max_abs_ratio)
