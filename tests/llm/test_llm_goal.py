"""The [llm] table of a goal and the --agents/--llm-* options: mistakes are refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.errors import GoalError
from swarmfab.goal import load_goal


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *map(str, args)])
    return result.exit_code, result.output


@pytest.mark.parametrize(("args", "says"), [
    (("--agents", "llm"), "need a model"),
    (("--agents", "llm,wizard"), "agents.1"),
    (("--agents", "llm", "--llm-model", "m", "--llm-base-url", "localhost:8000"),
     "must start with http"),
    (("--agents", "llm", "--llm-model", "m", "--llm-provider", "cohere"), "llm.provider"),
    (("--agents", "llm", "--llm-model", "m", "--llm-budget-usd", "-1"), "llm.budget_usd"),
])
def test_bad_llm_options_are_refused_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    code, output = run("kda", *args, "--db", tmp_path / "x.db", "--workdir", tmp_path)
    assert code == 2, output
    assert says in output and "Traceback" not in output
    assert not (tmp_path / "x.db").exists()


def test_the_public_endpoint_without_a_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, output = run("kda", "--agents", "llm,builtin", "--llm-model", "gpt-4.1-mini",
                       "--db", tmp_path / "x.db", "--workdir", tmp_path)
    assert code == 2 and "set OPENAI_API_KEY" in output


def test_a_goal_file_carries_the_llm_settings(tmp_path: Path) -> None:
    path = tmp_path / "goal.toml"
    path.write_text('workload = "kda"\nagents = ["llm"]\n[llm]\nmodel = "m"\n'
                    'roles = ["fusion"]\ntimeout = "30s"\nrepair_turns = 1\n')
    goal = load_goal(path)
    assert (goal.llm.model, goal.llm.roles, goal.llm.timeout_s) == ("m", ["fusion"], 30.0)
    assert goal.llm.key_variable() == "OPENAI_API_KEY"
    path.write_text('workload = "kda"\n[llm]\nmodel = "m"\nroles = ["magic"]\n')
    with pytest.raises(GoalError, match=r"llm\.roles\.0"):
        load_goal(path)
