"""An operator of your own: RMSNorm, described for swarmfab in one file.

    swarmfab verify examples/workloads/rmsnorm.py my_rmsnorm.py
    swarmfab run examples/workloads/rmsnorm.py --budget 30s

A workload file defines one subclass of ``swarmfab.workloads.Workload``: how to draw
inputs, a float64 reference, how to call a candidate, the baselines to beat, the
validation cases, the target shapes, and optionally a cost model, fuzzing draws and a
design space for the built-in agents. Candidates are Python files defining
``forward(x, weight, eps=1e-6) -> y``.
"""

from __future__ import annotations

import random

import torch

from swarmfab.kernels import DesignSpace, Knob, Setting
from swarmfab.workloads import Case, Dims, Forward, Inputs, Outputs, Workload

EPS = 1e-6


def rmsnorm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The textbook formulation a user writes first."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


# The template the built-in agents instantiate: two knobs, each a real choice.
_TEMPLATE = '''import torch


def forward(x, weight, eps=1e-6):
    {statistic}
    return {scale}
'''
_STATISTIC = {
    "pow-mean": "inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)",
    "dot": "inv = torch.rsqrt((x * x).sum(dim=-1, keepdim=True) / x.shape[-1] + eps)",
    "vector-norm": ("inv = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True)"
                    ".square_() / x.shape[-1] + eps)"),
}
_SCALE = {
    "two-products": "x * inv * weight",
    "in-place": "(x * inv).mul_(weight)",
    "addcmul": "torch.mul(x, inv).mul_(weight)",
}


def _render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
    source = _TEMPLATE.format(statistic=_STATISTIC[str(setting["statistic"])],
                              scale=_SCALE[str(setting["scale"])])
    return {"rmsnorm_candidate.py": source}, "rmsnorm_candidate.py", ()


class RMSNorm(Workload):
    name = "rmsnorm"
    description = "RMSNorm over the last dimension, with a learned scale"
    output_names = ("y",)
    default_shapes = (Dims.of(rows=4096, cols=1024), Dims.of(rows=64, cols=4096))

    def make_inputs(self, case: Case, dtype: torch.dtype = torch.float32) -> Inputs:
        assert isinstance(case.shape, Dims)
        gen = torch.Generator().manual_seed(case.seed)
        rows, cols = case.shape["rows"], case.shape["cols"]
        scale = case.distribution.magnitude
        x = torch.randn(rows, cols, generator=gen, dtype=torch.float64) * scale
        weight = 1 + 0.1 * torch.randn(cols, generator=gen, dtype=torch.float64)
        return {"x": x.to(dtype), "weight": weight.to(dtype)}

    def reference(self, inputs: Inputs) -> Outputs:
        x, weight = inputs["x"], inputs["weight"]
        assert isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)
        return {"y": rmsnorm_eager(x.double(), weight.double())}

    def call(self, forward: Forward, inputs: Inputs) -> Outputs:
        return {"y": forward(inputs["x"], inputs["weight"], eps=EPS)}

    def baselines(self) -> dict[str, Forward]:
        return {"torch-eager": rmsnorm_eager}

    def validation_cases(self) -> list[Case]:
        from swarmfab.workloads import Distribution

        return [
            Case("one-row", Dims.of(rows=1, cols=7)),
            Case("odd-sizes", Dims.of(rows=33, cols=129), seed=1),
            Case("large-values", Dims.of(rows=8, cols=64), Distribution(magnitude=1e4), seed=2),
            Case("tiny-values", Dims.of(rows=8, cols=64), Distribution(magnitude=1e-4), seed=3),
        ]

    def fuzz_cases(self, rng: random.Random, count: int) -> list[Case]:
        cases = []
        for _ in range(count):
            seed = rng.randrange(2**31)
            local = random.Random(seed)
            dims = Dims.of(rows=local.randint(1, 64), cols=local.randint(1, 300))
            cases.append(Case(f"fuzz-{seed}", dims, seed=seed, origin="fuzz"))
        return cases

    def flops(self, shape: object) -> float:
        assert isinstance(shape, Dims)
        return 4.0 * shape["rows"] * shape["cols"]  # square, sum, scale, weight

    def min_bytes(self, shape: object) -> float:
        assert isinstance(shape, Dims)
        return 4.0 * (2 * shape["rows"] * shape["cols"] + shape["cols"])  # x, y, weight

    def design_space(self) -> DesignSpace:
        return DesignSpace(
            name="rmsnorm-torch", workload=self.name, backend="python",
            knobs=(
                Knob("statistic", "algorithm", tuple(_STATISTIC), "pow-mean"),
                Knob("scale", "fusion", tuple(_SCALE), "two-products"),
            ),
            render=_render,
        )
