"""`swarmfab run` and `resume` around the swarm: the Ray cluster checked before any
setup, a run without a champion answered with the baselines, the command's start passed
on so the budget counts the whole command.

The swarm itself is replaced where a test is about what the CLI does with its result
(the real runs are in test_end_to_end.py and tests/swarm)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner, Result

from swarmfab.cli import app
from swarmfab.knowledge import Store
from swarmfab.swarm.run import RunResult

SHAPE = "B1 T8 H1 K8 V8"
GOAL = 'workload = "kda"\nthreads = 1\nbudget = "30s"\nshapes = [{B=1, T=8, H=1, K=8, V=8}]\n'


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_run_on_ray_checks_the_cluster_before_any_setup(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    began = time.monotonic()
    result = invoke("run", "kda", "--executor", "ray", "--address", "127.0.0.1:1",
                    "--budget", "30s", "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert time.monotonic() - began < 10, "ray.init waited on an address nobody answers at"
    assert result.exit_code == 1, result.output
    assert "no Ray cluster answers at 127.0.0.1:1" in result.output
    assert "ray start --head" in result.output
    assert "host peaks" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "wd").exists()


def test_run_on_ray_without_ray_installed_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = invoke("run", "kda", "--executor", "ray", "--db", tmp_path / "x.db",
                    "--workdir", tmp_path / "wd")
    assert result.exit_code == 1, result.output
    assert "pip install 'swarmfab[ray]'" in result.output
    assert not (tmp_path / "wd").exists()


class _FakeRun:
    """Stands in for swarmfab.swarm.Run: records how it was made, returns ``outcome``."""

    made: ClassVar[list[_FakeRun]] = []
    outcome: ClassVar[str] = "finished"

    def __init__(self, *args: Any, **kwargs: Any):
        self.kwargs = kwargs
        self.baseline_incumbents = {SHAPE: SimpleNamespace(name="torch-chunked")}
        _FakeRun.made.append(self)

    def execute(self, resume: str | None = None) -> RunResult:
        self.kwargs["log"](f"baselines on {SHAPE}: torch-chunked 0.1 ms, torch-recurrent 0.2 ms")
        return RunResult("r1", None, None, 7, {"rejected": 7}, [],
                         ["torch-recurrent", "torch-chunked"], self.outcome)


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> type[_FakeRun]:
    monkeypatch.setattr("swarmfab.swarm.Run", _FakeRun)
    monkeypatch.setattr(_FakeRun, "made", [])
    return _FakeRun


@pytest.mark.parametrize(
    ("command", "extra", "outcome", "code"),
    [
        ("run", [], "finished", 0),
        ("run", ["--fail-if-no-champion"], "finished", 1),
        ("run", [], "interrupted", 130),
        ("resume", [], "finished", 0),
        ("resume", ["--fail-if-no-champion"], "finished", 1),
    ],
    ids=["run", "run-fail-if-no-champion", "run-interrupted", "resume",
         "resume-fail-if-no-champion"],
)
def test_a_run_without_a_champion_answers_with_the_baselines(
    tmp_path: Path, fake_run: type[_FakeRun], monkeypatch: pytest.MonkeyPatch,
    command: str, extra: list[str], outcome: str, code: int,
) -> None:
    monkeypatch.setattr(fake_run, "outcome", outcome)
    (tmp_path / "goal.toml").write_text(GOAL)
    db = tmp_path / "x.db"
    if command == "run":
        target = str(tmp_path / "goal.toml")
    else:
        goal = {"workload": "kda", "threads": 1, "budget": 30,
                "shapes": [{"B": 1, "T": 8, "H": 1, "K": 8, "V": 8}]}
        target = Store(db).start_run("kda", goal, {"threads": 1})
    invoked = time.monotonic()
    result = invoke(command, target, *extra, "--no-lessons", "--db", db,
                    "--workdir", tmp_path / "wd")
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    [made] = fake_run.made
    started = made.kwargs["started"]  # the command's start, for the budget
    assert isinstance(started, float) and started <= time.monotonic()
    # this command's start (or the CLI's import just before it), never long ago
    assert invoked - started < 3.0
    if outcome == "interrupted":
        assert "no candidate beat" not in result.output
        return
    assert ("no candidate beat the baselines in 7 evaluations; the fastest baseline per "
            f"shape is the answer: {SHAPE}: torch-chunked") in result.output
