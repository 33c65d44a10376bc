"""The verification battery: the second tier, met once before a crowning, an export or a
refresh, and in ``swarmfab verify``.

The fast corpus is what every evaluation pays for, so it stays small. The battery is
what real use reaches (:meth:`Workload.battery_cases`: real sizes, extreme values, other
memory layouts, other thread counts). A case the operator is not defined on (a problem
file's own eager Model fails it: an input scale its arithmetic overflows at, say) is
left out, with the reason, rather than failing every candidate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from swarmfab.verify import compare_outputs
from swarmfab.workloads import Case, Tolerances, Workload

__all__ = ["Battery"]


@dataclass
class Battery:
    """A workload's battery for one evaluator: its cases, in the evaluator's dtype and
    thread count, decided once (the domain check runs the reference and a baseline)."""

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
                for case in self.workload.battery_cases(self.threads):
                    case = case.in_dtype(self.dtype)
                    why = self._outside(case)
                    if why:
                        self.left_out.append((case.name, why))
                    else:
                        kept.append(case)
                self._cases = kept
            return list(self._cases)

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
