"""A problem file's sizes as KernelBench's authors write them: constant expressions
(``N = 2048 * 2``) count, a resize replaces the whole expression, and sizes that do not
halve evenly still shrink. Memory is a budget as time is: sizes are halved until the
problem fits this host's share, and sizes that cannot fit say how much they need."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmfab.errors import WorkloadError
from swarmfab.goal import default_goal
from swarmfab.workloads import Dims, get_workload
from swarmfab.workloads.problem import ProblemWorkload, sizes
from swarmfab.workloads.problem.sizes import (
    MEMORY_ENV,
    HostMemory,
    data_bytes,
    fit_to_host,
    halved,
    host_memory,
    memory_needed,
    problem_sizes,
    resized_source,
)

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


# -- memory ------------------------------------------------------------------------------
def relu_problem(**sizes: int) -> str:
    """A ReLU over a (rows, cols) input: inputs and outputs, no weights."""
    names = list(sizes)
    lines = "".join(f"{name} = {value}\n" for name, value in sizes.items())
    return (f'import torch\nimport torch.nn as nn\n{lines}\n\n'
            'class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n'
            f'def get_inputs():\n    return [torch.randn({", ".join(names)})]\n\n\n'
            'def get_init_inputs():\n    return []\n')


def load(tmp_path: Path, name: str, source: str) -> ProblemWorkload:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    problem = get_workload(str(path))
    assert isinstance(problem, ProblemWorkload)
    return problem


def test_memory_needed_counts_inputs_outputs_and_the_reference(tmp_path: Path) -> None:
    problem = load(tmp_path, "square", relu_problem(rows=4096, cols=4096))
    data = 2 * 4096 * 4096 * 4  # the input and the output, float32
    assert data_bytes(problem, Dims.of(rows=4096, cols=4096)) == data
    assert memory_needed(problem, Dims.of(rows=4096, cols=4096)) == data * 3 * 2


def test_sizes_are_halved_until_the_problem_fits_in_memory(tmp_path: Path) -> None:
    problem = load(tmp_path, "square", relu_problem(rows=4096, cols=4095))
    # 8 MiB here, half of it for the problem: 48 bytes per element fit 256 x 256
    fitted = fit_to_host(problem, threads=1, memory=HostMemory(8 * 2**20, "a test"))
    assert fitted.dims == Dims.of(rows=256, cols=256) and fitted.halvings == 4
    assert fitted.eager_s is not None


def test_sizes_that_cannot_shrink_enough_say_how_much_they_need(tmp_path: Path) -> None:
    problem = load(tmp_path, "wide", relu_problem(batch=8, dim=2**20))  # batch cannot halve
    with pytest.raises(WorkloadError, match=r"wide.py at batch=8 dim=1048576 needs about "
                                            r"402\.7 MB .* this host has 8\.4 MB \(a test"
                                            r".*cannot shrink further"):
        fit_to_host(problem, threads=1, memory=HostMemory(8 * 2**20, "a test"))


def test_sizes_kept_as_is_that_do_not_fit_are_refused_before_any_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from swarmfab.swarm.launch import sized_for_host

    problem = load(tmp_path, "square", relu_problem(rows=4096, cols=4096))
    monkeypatch.setenv(MEMORY_ENV, "64M")
    goal = default_goal(str(problem.path))
    with pytest.raises(WorkloadError, match=r"needs about 805\.3 MB .* this host has 67\.1 MB "
                                            r"\(SWARMFAB_MEMORY_LIMIT"):
        sized_for_host(goal, "as-is", print)
    smaller = goal.with_overrides(sizes=[{"rows": 512, "cols": 512}])
    assert sized_for_host(smaller, "as-is", print) == smaller


def test_the_host_memory_is_the_least_of_meminfo_and_the_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = {"/proc/meminfo": "MemTotal: 9000000 kB\nMemAvailable:    4000000 kB\n",
             "/sys/fs/cgroup/memory.max": "1073741824\n",
             "/sys/fs/cgroup/memory.current": "536870912\n",
             "/sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 268435456\n"}
    monkeypatch.setattr(sizes, "_read", files.get)
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    assert host_memory() == HostMemory(2**30 - 2**28, "the cgroup's limit")
    files["/sys/fs/cgroup/memory.max"] = "max\n"
    assert host_memory() == HostMemory(4_000_000 * 1024, "MemAvailable")
    monkeypatch.setenv(MEMORY_ENV, "1.5G")
    assert host_memory() == HostMemory(int(1.5 * 2**30), MEMORY_ENV)
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(WorkloadError, match="SWARMFAB_MEMORY_LIMIT='lots'"):
        host_memory()
