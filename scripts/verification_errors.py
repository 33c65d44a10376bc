"""Print the RMS error ratio of honest float32 implementations on the KDA validation cases.

    .venv/bin/python scripts/verification_errors.py

The figures justify the default float32 tolerance (docs/verification.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from swarmfab.backends import CBackend
from swarmfab.workloads import Outputs, design_space, get_workload


def rms_ratio(out: Outputs, ref: Outputs) -> float:
    return max(
        float((out[n].double() - ref[n]).square().mean().sqrt() / ref[n].square().mean().sqrt())
        for n in ref
    )


def main() -> None:
    workload, space = get_workload("kda"), design_space("kda")
    implementations = dict(workload.baselines())
    with tempfile.TemporaryDirectory() as cache:
        for flags in ("O3-native", "O3-native-fastmath"):
            candidate = space.instantiate({**space.default(), "flags": flags}, threads=2)
            artifact = CBackend().build(candidate, Path(cache))
            implementations[f"C template {flags}"] = CBackend().load(
                artifact, workload, fill_outputs=True
            )
        cases = workload.validation_cases()
        print("| implementation | " + " | ".join(case.name for case in cases) + " |")
        for name, forward in implementations.items():
            errors = []
            for case in cases:
                inputs = workload.make_inputs(case)
                with torch.no_grad():
                    errors.append(rms_ratio(workload.call(forward, inputs),
                                            workload.reference(inputs)))
            print(f"| {name} | " + " | ".join(f"{e:.1e}" for e in errors) + " |")


if __name__ == "__main__":
    main()
