"""A problem file's sizes as KernelBench's authors write them: constant expressions
(``N = 2048 * 2``) count, a resize replaces the whole expression, and sizes that do not
halve evenly still shrink."""

from __future__ import annotations

from pathlib import Path

from swarmfab.workloads import Dims, get_workload
from swarmfab.workloads.problem import ProblemWorkload
from swarmfab.workloads.problem.sizes import halved, problem_sizes, resized_source

EXPRESSIONS = '''"""Sizes written as their authors write them (é: bytes are not characters)."""
N = 2048 * 2  # rows
M: int = 2**10 + 1
K = (
    64
    * 8
)
derived = N * 2
ratio = 4096 / 2
small = 2 * 3
negative = -(16)
huge = 10 ** 10 ** 10
shifted = 1 << 100
'''
# KernelBench's 1_Square_matrix_multiplication_.py, at a size a test runs at once
MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 16 * 2


def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]


def get_init_inputs():
    return []
'''


def test_constant_integer_expressions_are_sizes_and_names_are_derived() -> None:
    # a name makes an expression derived; a float, a small value, an exponent past 64 is
    # no size (and is never computed)
    assert problem_sizes(EXPRESSIONS) == {"N": 4096, "M": 1025, "K": 512}


def test_a_resize_replaces_the_whole_expression() -> None:
    resized = resized_source(EXPRESSIONS, {"N": 1000, "K": 24})
    assert "N = 1000  # rows\n" in resized
    assert "K = (\n    24\n)\n" in resized
    assert "M: int = 2**10 + 1\n" in resized  # left out: kept as written
    assert problem_sizes(resized) == {"N": 1000, "M": 1025, "K": 24}


def test_sizes_that_do_not_halve_evenly_still_shrink() -> None:
    assert halved({"a": 4095, "b": 128}) == {"a": 2048, "b": 64}
    assert halved({"a": 4095, "b": 128}, times=4) == {"a": 256, "b": 8}
    assert halved({"a": 15}) == {"a": 8}
    assert halved({"a": 14}) is None  # 7 would fall under MIN_SIZE


def test_a_kernelbench_matmul_file_loads_and_resizes(tmp_path: Path) -> None:
    path = tmp_path / "1_Square_matrix_multiplication_.py"
    path.write_text(MATMUL)
    problem = get_workload(str(path))
    assert isinstance(problem, ProblemWorkload)
    assert problem.sizes == {"N": 32}
    assert problem.runs_at(Dims.of(N=16))
    namespace = problem.namespace(Dims.of(N=16))
    assert namespace["N"] == 16 and namespace["get_inputs"]()[0].shape == (16, 16)
