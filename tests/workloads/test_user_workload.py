"""User workloads: an operator described in a Python file is verified and optimised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.errors import WorkloadError
from swarmfab.workloads import Dims, get_workload
from swarmfab.workloads._user import load_workload_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "rmsnorm.py"
GOOD = """import torch
def forward(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
"""
ODD_COLUMNS_WRONG = """import torch
def forward(x, weight, eps=1e-6):
    if x.shape[-1] % 2:
        return x * weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
"""


def _verify(tmp_path: Path, source: str) -> tuple[int, dict[str, object]]:
    candidate = tmp_path / "candidate.py"
    candidate.write_text(source)
    result = CliRunner().invoke(app, [
        "verify", str(EXAMPLE), str(candidate), "--json", "--db", str(tmp_path / "x.db"),
        "--workdir", str(tmp_path / "work"),
    ])
    return result.exit_code, json.loads(result.stdout)


def test_example_workload_loads_with_its_shapes_and_space() -> None:
    workload = get_workload(str(EXAMPLE))
    assert workload.name == "rmsnorm"
    assert all(isinstance(shape, Dims) for shape in workload.default_shapes)
    space = workload.design_space()
    assert space is not None and space.backend == "python"


def test_honest_candidate_of_a_user_workload_is_accepted(tmp_path: Path) -> None:
    code, verdict = _verify(tmp_path, GOOD)
    assert code == 0 and verdict["status"] == "accepted"


def test_wrong_candidate_of_a_user_workload_is_rejected_naming_the_case(tmp_path: Path) -> None:
    code, verdict = _verify(tmp_path, ODD_COLUMNS_WRONG)
    assert code == 1 and verdict["status"] == "rejected"
    assert "y matches reference" in str(verdict["reason"])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("raise RuntimeError('typo')\n", "failed to import"),
        ("x = 1\n", "define exactly one subclass"),
        ("from swarmfab.workloads import Workload\nclass Half(Workload):\n    name = 'half'\n",
         "does not implement baselines, call, make_inputs"),
        ("from swarmfab.workloads import Workload\n"
         "class NoShapes(Workload):\n    name = 'x'\n    output_names = ('y',)\n"
         "    def make_inputs(self, case, dtype=None): return {}\n"
         "    def reference(self, inputs): return {}\n"
         "    def call(self, forward, inputs): return {}\n"
         "    def baselines(self): return {'b': print}\n"
         "    def validation_cases(self): return []\n",
         "`default_shapes` is empty"),
    ],
    ids=["import-error", "no-workload", "missing-methods", "empty-declarations"],
)
def test_a_workload_file_with_a_mistake_names_the_problem(
    tmp_path: Path, source: str, message: str
) -> None:
    path = tmp_path / "op.py"
    path.write_text(source)
    with pytest.raises(WorkloadError, match=message):
        load_workload_file(str(path))


def test_missing_workload_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="does not exist"):
        load_workload_file(str(tmp_path / "absent.py"))
