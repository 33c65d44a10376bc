"""The command line keeps its word on its options: a store URL stays a URL on every path,
the store can be named once in the environment, ``--version`` answers, and an option a
goal would ignore is refused, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from swarmfab.cli import app

URL = "postgresql://fab:s3cret@db.example:5432/fab"
ENGINE_GOAL = 'kind = "engine"\nmodel = "ckpt"\n'


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


class _Opened(Exception):
    """Raised by the stand-in store: the command got as far as opening it."""


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each store the command opens was given; opening one ends the command."""
    from swarmfab import knowledge

    given: list[Any] = []

    def store(path_or_url: Any = None) -> None:
        given.append(path_or_url)
        raise _Opened

    monkeypatch.setattr(knowledge, "Store", store)
    return given


@pytest.fixture
def engine_goal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An engine goal file whose loading is stood in for (no checkpoint is read)."""
    from swarmfab.serving import goal as engine_goals

    path = tmp_path / "engine.toml"
    path.write_text(ENGINE_GOAL)
    monkeypatch.setattr(engine_goals, "load_engine_goal", lambda *_, **__: object())
    return path


def test_an_engine_goal_opens_a_url_store_as_the_url(engine_goal: Path,
                                                     opened: list[Any]) -> None:
    result = invoke("run", engine_goal, "--db", URL, "--workdir", engine_goal.parent)
    assert isinstance(result.exception, _Opened), result.output
    assert opened == [URL]  # not Path(URL): postgresql:/fab:... a SQLite file


def test_swarmfab_db_names_the_store_and_db_overrides_it(tmp_path: Path) -> None:
    named = tmp_path / "named.db"
    result = invoke("runs", env={"SWARMFAB_DB": str(named)})
    assert result.exit_code == 0, result.output
    assert named.exists()
    given = tmp_path / "given.db"
    result = invoke("runs", "--db", given, env={"SWARMFAB_DB": str(tmp_path / "other.db")})
    assert result.exit_code == 0, result.output
    assert given.exists() and not (tmp_path / "other.db").exists()
    assert "SWARMFAB_DB" in invoke("show", "--help").output


def test_swarmfab_db_reaches_an_engine_goal_too(engine_goal: Path, opened: list[Any]) -> None:
    result = invoke("run", engine_goal, "--workdir", engine_goal.parent,
                    env={"SWARMFAB_DB": URL})
    assert isinstance(result.exception, _Opened), result.output
    assert opened == [URL]


def test_version_answers_with_the_installed_version() -> None:
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"swarmfab {version('swarmfab')}"


def test_options_an_engine_goal_ignores_are_refused_saying_why(engine_goal: Path,
                                                               opened: list[Any]) -> None:
    result = invoke("run", engine_goal, "--workers", "2", "--agents", "llm",
                    "--llm-model", "m", "--db", engine_goal.parent / "x.db")
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert 'not for an engine goal (kind = "engine")' in said
    assert "--workers (the engine factory measures one recipe at a time" in said
    assert "--agents (engine recipes are proposed by the factory's own" in said
    assert "--llm-model" in said and "leave them out" in said
    assert opened == []  # refused before the store was opened


def test_resuming_an_engine_run_refuses_what_it_would_ignore(tmp_path: Path) -> None:
    from swarmfab.knowledge import Store

    db = tmp_path / "x.db"
    Store(db).start_run("engine", {"kind": "engine", "model": "ckpt"}, {})
    result = invoke("resume", "latest", "--executor", "ray", "--db", db)
    assert result.exit_code == 2, result.output
    assert "--executor (engine recipes are measured on this host only)" in result.output


def test_an_address_without_ray_and_llm_options_without_llm_agents_are_refused(
    tmp_path: Path,
) -> None:
    where = ("--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    result = invoke("run", "kda", "--address", "10.0.0.1:6379", *where)
    assert result.exit_code == 2, result.output
    assert "--address 10.0.0.1:6379: a Ray cluster's address, for --executor ray" in (
        " ".join(result.output.split()))
    result = invoke("run", "kda", "--llm-model", "m", "--llm-budget-tokens", "10", *where)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--llm-model, --llm-budget-tokens apply to LLM agents" in said
    assert "add --agents llm,builtin" in said
    assert not (tmp_path / "wd").exists()
