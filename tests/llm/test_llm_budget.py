"""An LLM budget is held, or refused before the run: a dollar budget needs the model's
price (the table's, or given with --llm-price-input/--llm-price-output); a token budget
holds for any model."""

from __future__ import annotations

import importlib
import random
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply
from typer.testing import CliRunner

from swarmfab.agents.base import Context
from swarmfab.agents.llm import llm_agents
from swarmfab.cli import app
from swarmfab.errors import GoalError
from swarmfab.goal import Goal, default_goal
from swarmfab.workloads import design_space

GOOD_EDIT = ("RATIONALE: unroll the micro-kernel twice\n<<<<<<< SEARCH\n"
             "#define CH_RB 4\n#define CH_UNROLL 1\n=======\n"
             "#define CH_RB 4\n#define CH_UNROLL 2\n>>>>>>> REPLACE\n")


def goal_at(base_url: str, **llm: Any) -> Goal:
    return default_goal("kda").with_overrides(
        threads=1, shapes=[{"B": 1, "T": 64, "H": 2, "K": 16, "V": 16}], agents=["llm"],
        llm={"model": "fake-coder", "base_url": base_url, "review": False,
             "roles": ["vectorisation", "algorithm"], **llm})


def context(goal: Goal) -> Context:
    return Context(goal, design_space("kda"), None, frozenset(), (),  # type: ignore[arg-type]
                   rng=random.Random(0))


def test_a_dollar_budget_for_an_unpriced_model_is_refused_naming_what_to_pass(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, [
        "run", "kda", "--agents", "llm", "--llm-model", "fake-coder",
        "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-budget-usd", "0.5",
        "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "wd")])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "'fake-coder'" in said and "price" in said and "unknown" in said
    assert "--llm-price-input" in said and "--llm-price-output" in said
    assert "--llm-budget-tokens" in said and "Traceback" not in said
    assert not (tmp_path / "wd").exists()  # refused before anything was built


def test_prices_given_on_the_command_line_reach_the_goal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_command = importlib.import_module("swarmfab.cli.run")  # the module, not the command
    seen: list[Goal] = []

    def execute(goal: Goal, *_: Any, **__: Any) -> Any:
        seen.append(goal)
        raise GoalError("stop here")

    monkeypatch.setattr(run_command, "execute_goal", execute)
    result = CliRunner().invoke(app, [
        "run", "kda", "--agents", "llm", "--llm-model", "fake-coder",
        "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-budget-usd", "0.5",
        "--llm-price-input", "2", "--llm-price-output", "8", "--llm-budget-tokens", "9000",
        "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "wd")])
    assert "stop here" in result.output
    [goal] = seen
    llm = goal.llm
    assert (llm.budget_usd, llm.price_input, llm.price_output, llm.budget_tokens) == (
        0.5, 2.0, 8.0, 9000)


def test_one_price_alone_is_refused() -> None:
    with pytest.raises(GoalError, match="give both prices"):
        goal_at("http://127.0.0.1:9/v1", price_input=1.0)


def test_a_given_price_holds_the_dollar_budget_against_the_server() -> None:
    # the scripted reply counts 1,200 input and 300 output tokens: $1.50 at $1,000/Mtok
    with FakeLLM(default=Reply(GOOD_EDIT)) as llm:
        goal = goal_at(llm.base_url, price_input=1000.0, price_output=1000.0, budget_usd=1.0)
        (first, second), _, spend = llm_agents(goal.llm)
        assert len(first.propose(context(goal))) == 1
        assert second.propose(context(goal)) == []
    assert len(llm.requests) == 1
    assert spend.cost_usd == pytest.approx(1.5)
    assert "of the $1.00 budget" in (spend.exhausted() or "")


def test_a_token_budget_holds_for_an_unpriced_model() -> None:
    with FakeLLM(default=Reply(GOOD_EDIT)) as llm:
        goal = goal_at(llm.base_url, budget_tokens=1000)
        (first, second), _, spend = llm_agents(goal.llm)
        assert len(first.propose(context(goal))) == 1
        assert second.propose(context(goal)) == []
    assert len(llm.requests) == 1
    assert spend.summary()["cost_usd"] is None
    assert "of the 1000 token budget" in (spend.exhausted() or "")


def test_an_unpriced_model_without_a_dollar_budget_runs_uncapped_in_dollars() -> None:
    _, _, spend = llm_agents(goal_at("http://127.0.0.1:9/v1").llm)
    assert spend.budget_usd is None and spend.exhausted() is None
    _, _, priced = llm_agents(goal_at("http://127.0.0.1:9/v1", price_input=1.0,
                                      price_output=2.0).llm)
    assert priced.budget_usd == 1.0  # the default budget, now that it can be held
