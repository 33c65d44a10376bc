"""torch.compile as a baseline: opt-in, compiled inside the sandbox, correct, and timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.errors import GoalError
from swarmfab.goal import default_goal
from swarmfab.workloads import Case, Shape, get_workload


def test_torch_compile_is_an_opt_in_baseline() -> None:
    kda = get_workload("kda")
    assert "torch-compile" in kda.baselines()
    assert "torch-compile" not in kda.default_baselines()
    assert "torch-compile" in kda.compiling_baselines


def test_a_goal_naming_an_unknown_baseline_is_refused() -> None:
    with pytest.raises(GoalError, match="unknown baseline"):
        default_goal("kda").with_overrides(baselines=["torch-magic"])


def test_the_compiled_baseline_computes_kda() -> None:
    kda = get_workload("kda")
    inputs = kda.make_inputs(Case("x", Shape(1, 9, 2, 4, 16, 16, initial_state=True)))
    outputs = kda.call(kda.baselines()["torch-compile"], inputs)
    reference = kda.reference(inputs)
    for name, expected in reference.items():
        error = (outputs[name].double() - expected).norm() / expected.norm()
        assert float(error) < 1e-5, name


@pytest.mark.slow
def test_bench_times_torch_compile_inside_the_sandbox(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "bench", "kda", "--shape", "1,32,2,16,16", "--baseline", "torch-recurrent",
        "--baseline", "torch-compile", "--json", "--threads", "1",
        "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "work"),
    ])
    assert result.exit_code == 0, result.output
    (table,) = json.loads(result.stdout)
    assert set(table["seconds"]) == {"torch-recurrent", "torch-compile"}
    assert table["seconds"]["torch-compile"]["median"] > 0
