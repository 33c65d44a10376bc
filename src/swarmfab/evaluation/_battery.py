"""The verification battery: the second tier, met once before a crowning, an export or a
refresh, and in ``swarmfab verify``.

The fast corpus is what every evaluation pays for, so it stays small. The battery is
what real use reaches (:meth:`Workload.battery_cases`: real sizes, extreme values, other
memory layouts, other thread counts). A case the operator is not defined on (a problem
file's own eager Model fails it: an input scale its arithmetic overflows at, say) is
left out, with the reason, rather than failing every candidate.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from swarmfab.evaluation._references import salted_seed
from swarmfab.records import Status, Verdict
from swarmfab.verify import compare_outputs
from swarmfab.verify.probes import BATTERY
from swarmfab.workloads import Case, Tolerances, Workload

__all__ = ["Battery"]


@dataclass
class Battery:
    """A workload's battery for one evaluator: its cases, in the evaluator's dtype and
    thread count, decided once (the domain check runs the reference and a baseline). Their
    seeds are salted once, with a secret, so their references can be kept for the
    evaluator's life: every crowning meets the same battery, and pays only for the
    candidate's calls."""

    workload: Workload
    threads: int
    dtype: str
    tolerances: Tolerances
    _cases: list[Case] | None = None
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (case, why)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cases(self) -> list[Case]:
        with self._lock:
            if self._cases is None:
                kept = []
                salt = secrets.randbelow(2**31)  # once: the references are kept
                for case in self.workload.battery_cases(self.threads):
                    case = dataclasses.replace(case.in_dtype(self.dtype), origin=BATTERY,
                                               seed=salted_seed(case.seed, salt))
                    why = self._outside(case)
                    if why:
                        self.left_out.append((case.name, why))
                    else:
                        kept.append(case)
                self._cases = kept
            return list(self._cases)

    def stages(self) -> list[list[Case]]:
        """The cases in up to three verifications, each a job of its own: those under a
        twentieth of the largest case's work first, then those under an eighth, then the
        large ones. Most failures end in the first (a value, a layout, a thread count at
        a moderate size), and a candidate that fails it pays for nothing larger."""
        cases = self.cases()
        work = [self.workload.flops(case.shape) or 0.0 for case in cases]
        largest = max(work, default=0.0)
        stages, low = [], -math.inf
        for high in (largest / 20, largest / 8, math.inf):
            stages.append([case for case, w in zip(cases, work, strict=True) if low < w <= high])
            low = high
        return [stage for stage in stages if stage]

    def judge(self, verify: Callable[[list[Case]], Verdict]) -> Verdict:
        """``verify`` (a candidate's verification on given cases) on every stage, until
        one rejects."""
        verdict: Verdict | None = None
        for stage in self.stages() or [[]]:  # the cheap cases first: most failures end there
            judged = verify(stage)
            verdict = judged if verdict is None else _joined(verdict, judged)
            if judged.status is not Status.ACCEPTED:
                return verdict
        assert verdict is not None  # at least one stage was judged
        return dataclasses.replace(verdict, reason=f"correct on the battery's "
                                   f"{len(self.cases())} cases")

    def after(self, fast: Verdict | None, battery: Verdict) -> Verdict:
        """The battery's verdict read after the first tier's, as one verdict."""
        if fast is None:
            return battery
        verdict = _joined(fast, battery)
        if battery.status is not Status.ACCEPTED:
            return verdict
        known = len({check.case.split(" (")[0] for check in verdict.checks})
        kept = battery.reason.partition("; ")[2]
        return dataclasses.replace(verdict, reason=f"correct on {known} cases "
                                   f"({len(self.cases())} of them the battery's)"
                                   + (f"; {kept}" if kept else ""))

    def _outside(self, case: Case) -> str:
        """Why ``case`` lies outside the operator's domain ("" when inside): the
        workload's domain baseline, in this process, fails it."""
        name = self.workload.domain_baseline(case)
        if name is None:
            return ""
        inputs = self.workload.make_inputs(case)
        reference = self.workload.reference(inputs)
        try:
            with torch.no_grad():
                got = self.workload.call(self.workload.baselines()[name], inputs)
        except Exception as exc:  # the operator itself cannot take these inputs
            return f"{name} raises {type(exc).__name__}: {exc}"
        dtypes = {output: self.workload.output_dtype(case, output) for output in reference}
        failed = [check for check in compare_outputs(case.name, got, reference,
                                                     self.tolerances, dtypes)
                  if not check.passed]
        return f"{name} itself fails it ({failed[0].detail})" if failed else ""


def _joined(first: Verdict, then: Verdict) -> Verdict:
    """``then``'s status and reason, with both verdicts' checks and time."""
    return dataclasses.replace(then, checks=(*first.checks, *then.checks),
                               elapsed_s=first.elapsed_s + then.elapsed_s)
