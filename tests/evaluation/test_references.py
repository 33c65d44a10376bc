"""The references a verification compares against: computed once, a verification's
dropped after it, the target shapes' kept; and the checks of a run's outputs."""

from __future__ import annotations

from swarmfab.evaluation._references import References, salted_seed, with_salt
from swarmfab.evaluation._worker import CaseRun
from swarmfab.verify import probes
from swarmfab.workloads import Case, Shape, Tolerances
from swarmfab.workloads.delta.kda import KDA

SHAPE = Shape(1, 16, 2, 2, 8, 8)
TOLERANCES = Tolerances(rms_ratio=1e-3, max_abs_ratio=1e-2)


def test_a_verifications_references_are_dropped_and_the_targets_kept() -> None:
    target, case = Case("target", SHAPE, seed=5), Case("check", SHAPE, seed=7)
    references = References(KDA(), TOLERANCES, [target])
    references.compute([case, target])
    kept, dropped = references.of(target), references.of(case)
    assert references.of(case) is dropped  # computed once
    references.forget([case, target])
    assert references.of(target) is kept
    again = references.of(case)
    assert again is not dropped
    assert all((again[name] == dropped[name]).all() for name in dropped)  # same inputs


def test_outputs_are_checked_against_the_case_and_its_twin() -> None:
    case = Case("check", SHAPE, seed=7)
    references = References(KDA(), TOLERANCES, [])
    def as_returned(outputs: dict) -> dict:  # a candidate answers in float32
        return {name: value.float() for name, value in outputs.items()}

    first = as_returned(references.of(case))
    twin = as_returned(references.of(probes.twin_case(case)))
    honest = CaseRun(case.name, outputs=first, twin_outputs=twin)
    assert all(check.passed for check in references.case_checks(case, honest))
    # a kernel that answers the second call from the first call's outputs
    cached = CaseRun(case.name, outputs=first, twin_outputs=first)
    failed = [check for check in references.case_checks(case, cached) if not check.passed]
    assert failed and all(check.case == probes.twin_case(case).name for check in failed)
    crashed = CaseRun(case.name, error="RuntimeError: boom")
    [check] = references.case_checks(case, crashed)
    assert not check.passed and "boom" in check.detail


def test_built_in_cases_are_salted_and_stored_ones_replay_exactly() -> None:
    builtin = Case("b", SHAPE, seed=3)
    stored = Case("s", SHAPE, seed=3, origin="counterexample")
    assert with_salt(builtin, 99).seed == salted_seed(3, 99) != 3
    assert with_salt(stored, 99) == stored
