"""The float64 references a verification compares against, and the comparisons.

They are computed here, in the trusted parent, once per case and before any candidate's
outputs are read. A verification's cases have secret salted seeds that never repeat, so
their references are dropped once it is judged; the target shapes' are kept for every
timing of the run.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import torch

from swarmfab.evaluation._worker import CaseRun, ShapeRun
from swarmfab.records import CheckResult
from swarmfab.verify import compare_outputs, probes
from swarmfab.workloads import Case, Inputs, Outputs, Tolerances, Workload

__all__ = ["References", "salted_seed", "with_salt"]


def _key(case: Case) -> tuple[str, int, str]:
    return case.name, case.seed, case.dtype


def _keys(cases: Sequence[Case]) -> set[tuple[str, int, str]]:
    """The cases and their twins, as references are keyed."""
    return {key for case in cases for key in (_key(case), _key(probes.twin_case(case)))}


class References:
    """The workload's reference outputs by case (and by nudged twin), computed once.
    Thread-safe: several verifications may compute and read at once."""

    def __init__(self, workload: Workload, tolerances: Tolerances, targets: Sequence[Case]):
        self.workload = workload
        self.tolerances = tolerances
        self._kept = _keys(targets)
        self._computed: dict[tuple[str, int, str, bool], Outputs] = {}
        self._lock = threading.Lock()

    def of(self, case: Case, nudged: bool = False) -> Outputs:
        """The float64 reference of ``case`` (or of its nudged twin)."""
        key = (*_key(case), nudged)
        with self._lock:
            known = self._computed.get(key)
        if known is not None:
            return known
        inputs: Inputs
        if nudged:
            twin = self.workload.make_inputs(probes.twin_case(case))
            inputs = probes.nudged(twin, probes.nudge_seed(case))
        else:
            inputs = self.workload.make_inputs(case)
        with torch.no_grad():
            computed = self.workload.reference(inputs)
        with self._lock:
            return self._computed.setdefault(key, computed)

    def compute(self, cases: Sequence[Case]) -> None:
        """Every reference a verification of ``cases`` compares against."""
        for case in cases:
            self.of(case)
            self.of(probes.twin_case(case))
            if case.origin != probes.BATTERY:  # the battery makes no nudged call
                self.of(case, nudged=True)

    def keep(self, cases: Sequence[Case]) -> None:
        """Keep the references of ``cases`` for every later verification (the battery's,
        salted once per evaluator and met before every crowning)."""
        with self._lock:
            self._kept |= _keys(cases)

    def forget(self, cases: Sequence[Case]) -> None:
        """Drop the references of ``cases`` (not of a target shape)."""
        dropped = _keys(cases) - self._kept
        with self._lock:
            for key in [k for k in self._computed if k[:3] in dropped]:
                del self._computed[key]

    def case_checks(self, case: Case, run: CaseRun) -> list[CheckResult]:
        """Checks in the order that names the root cause first: the first call's outputs,
        then the probes (a modified input explains the later calls' wrong answers), then
        the calls that depend on the first (no final state asked, fresh inputs)."""
        if run.error is not None or run.outputs is None or run.twin_outputs is None:
            return [CheckResult(case.name, "runs without error", False, run.error or "no output")]
        reference = self.of(case)
        checks = self._compare(case, case.name, run.outputs, reference)
        checks += [CheckResult(case.name, check, not found, found)
                   for check, found in run.findings.items()]
        if run.lean_outputs is not None:
            checks += self._compare(case, f"{case.name} (optional outputs not requested)",
                                    run.lean_outputs,
                                    {name: reference[name] for name in run.lean_outputs})
        twin = probes.twin_case(case)
        checks += self._compare(case, twin.name, run.twin_outputs, self.of(twin))
        if run.nudged_outputs is not None:
            checks += self._compare(case, f"{case.name} (one element of each input nudged)",
                                    run.nudged_outputs, self.of(case, nudged=True))
        return checks

    def target_checks(self, case: Case, run: ShapeRun) -> list[CheckResult]:
        """A timed shape's outputs: its first call's, and a timed call's on fresh inputs."""
        if run.error is not None or run.outputs is None:
            return [CheckResult(case.name, "runs without error", False, run.error or "no output")]
        checks = self._compare(case, case.name, run.outputs, self.of(case))
        timed_case = f"{case.name} (a timed call, fresh inputs)"
        if run.timed_outputs is None:
            return [*checks, CheckResult(timed_case, "timed call kept", False,
                                         "no outputs from the timed calls")]
        return checks + self._compare(case, timed_case, run.timed_outputs,
                                      self.of(probes.twin_case(case)))

    def _compare(self, case: Case, label: str, outputs: Outputs,
                 reference: Outputs) -> list[CheckResult]:
        """Each output against its reference, in the dtype the workload says it comes
        back in for ``case``."""
        dtypes = {name: self.workload.output_dtype(case, name) for name in reference}
        return compare_outputs(label, outputs, reference, self.tolerances, dtypes)


def salted_seed(seed: int, salt: int) -> int:
    return (seed * 1_000_003 + salt) % 2**31


def with_salt(case: Case, salt: int) -> Case:
    """Built-in cases and fresh fuzz draws get secret seeds; stored cases (a user's, or a
    counterexample kept with the exact seed that broke a candidate) replay exactly."""
    if case.origin not in ("builtin", "fuzz"):
        return case
    return dataclasses.replace(case, seed=salted_seed(case.seed, salt))

