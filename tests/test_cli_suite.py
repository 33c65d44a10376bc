"""`swarmfab suite` when problems go wrong: one too large for the memory a test sets is
shrunk or reported, one whose run fails for any reason is a row with its reason, the
others are scored and kept at once, and `--resume` runs only what is not done.

The swarm itself is replaced (real suite runs are in tests/llm/test_llm_suite.py): what
is checked is what the command does around each problem's run."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.knowledge import Store


def relu_problem(**sizes: int) -> str:
    lines = "".join(f"{name} = {value}\n" for name, value in sizes.items())
    return (f'import torch\nimport torch.nn as nn\n{lines}\n\n'
            'class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n'
            f'def get_inputs():\n    return [torch.randn({", ".join(sizes)})]\n\n\n'
            'def get_init_inputs():\n    return []\n')


PROBLEMS = {
    "a_large": relu_problem(rows=4096, cols=4095),  # 400 MB to run: halved until it fits
    "b_stuck": relu_problem(batch=8, dim=2**20),  # batch cannot halve: never fits
    "c_fails": relu_problem(rows=64, cols=32),  # its run raises
    "d_small": relu_problem(rows=64, cols=32),
}


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, int]]]:
    """Each problem run, with its sizes; the run is recorded in the store as finished,
    with nothing crowned; c_fails raises as a run out of memory would."""
    started: list[tuple[str, dict[str, int]]] = []

    def execute(goal: Any, store: Store, *_: Any, **__: Any) -> tuple[Any, Any]:
        name = Path(goal.workload).stem
        started.append((name, dict(goal.sizes[0]) if goal.sizes else {}))
        if name == "c_fails":
            raise RuntimeError("DefaultCPUAllocator: not enough memory")
        run_id = store.start_run(goal.workload, goal.model_dump(by_alias=True), {})
        store.finish_run(run_id, "finished", None)
        return (SimpleNamespace(run_id=run_id, evaluations=3, champion=None),
                SimpleNamespace(calibration=None))

    suite_module = importlib.import_module("swarmfab.cli.suite")
    monkeypatch.setattr(suite_module, "execute_goal", execute)
    monkeypatch.setenv("SWARMFAB_MEMORY_LIMIT", "8M")
    return started


def suite(tmp_path: Path, *extra: str) -> dict[str, Any]:
    problems = tmp_path / "problems"
    problems.mkdir(exist_ok=True)
    for name, source in PROBLEMS.items():
        (problems / f"{name}.py").write_text(source)
    result = CliRunner().invoke(app, [
        "suite", str(problems), "--threads", "1", "--json", "--db", str(tmp_path / "x.db"),
        "--workdir", str(tmp_path / "wd"), *extra])
    assert result.exit_code == 0, result.output
    card: dict[str, Any] = json.loads(result.stdout)
    return card


def test_a_suite_scores_every_problem_whatever_happens_to_the_others(
    tmp_path: Path, runs: list[tuple[str, dict[str, int]]],
) -> None:
    card = suite(tmp_path)
    rows = {row["problem"]: row for row in card["problems"]}
    assert list(rows) == list(PROBLEMS) and card["total"] == 4
    assert runs[0] == ("a_large", {"rows": 256, "cols": 256})  # halved 4x to fit 4 MiB
    assert rows["a_large"]["status"] == "no-champion"
    assert rows["b_stuck"]["status"] == "error"
    assert "needs about 402.7 MB" in rows["b_stuck"]["detail"]
    assert "this host has 8.4 MB (SWARMFAB_MEMORY_LIMIT" in rows["b_stuck"]["detail"]
    assert rows["c_fails"]["status"] == "error"
    assert rows["c_fails"]["detail"] == "RuntimeError: DefaultCPUAllocator: not enough memory"
    assert rows["d_small"]["status"] == "no-champion" and rows["d_small"]["evaluations"] == 3
    # each finished problem's score is in the store with its run, as soon as it is done
    store = Store(tmp_path / "x.db")
    kept = [json.loads(detail)["problem"] for run in store.runs()
            for _, detail in store.events(run.id, "suite-score")]
    assert kept == ["a_large", "d_small"]


def test_resume_runs_only_the_problems_not_done(
    tmp_path: Path, runs: list[tuple[str, dict[str, int]]],
) -> None:
    first = suite(tmp_path)
    runs.clear()
    again = suite(tmp_path, "--resume")
    assert [name for name, _ in runs] == ["c_fails"]  # b_stuck fails before its run
    assert again == first  # the finished problems' scores, as they were
