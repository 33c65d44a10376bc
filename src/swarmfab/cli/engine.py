"""``swarmfab run`` and ``resume`` of an engine goal (``kind = "engine"``): the engine
factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from swarmfab.cli._common import (
    ENGINE_MODULES,
    command_started,
    console,
    errors,
    print_json,
    require_extra,
)

__all__ = ["resume_engine", "run_engine"]

ENGINE_GOAL = 'an engine goal (kind = "engine")'


def run_engine(path: Path, *, budget: str | None, db: str, workdir: Path,
               seed: int | None, threads: int | None, max_evaluations: int | None,
               fail_if_no_champion: bool, use_lessons: bool = True,
               as_json: bool = False) -> None:
    require_extra("engine", ENGINE_GOAL, ENGINE_MODULES)
    from swarmfab.knowledge import Store
    from swarmfab.serving.factory import run_engine_goal
    from swarmfab.serving.goal import load_engine_goal

    # ``db`` as given: a SQLite path or a URL (a Path would turn postgresql:// into
    # postgresql:/, a SQLite file of that name)
    goal = load_engine_goal(path, budget=budget, seed=seed, threads=threads,
                            max_evaluations=max_evaluations)
    _finish(goal, lambda: run_engine_goal(goal, Store(db), workdir, _printer(as_json),
                                          started=command_started(),
                                          use_lessons=use_lessons), fail_if_no_champion,
            as_json)


def resume_engine(store: Any, run_id: str, recorded: dict[str, Any], *, budget: str | None,
                  workdir: Path, max_evaluations: int | None,
                  fail_if_no_champion: bool, use_lessons: bool = True,
                  as_json: bool = False) -> None:
    """Continue a stopped engine run with the goal it recorded (``budget`` and
    ``max_evaluations`` given here replace the recorded ones for this session)."""
    require_extra("engine", ENGINE_GOAL, ENGINE_MODULES)
    from swarmfab.serving.factory import run_engine_goal
    from swarmfab.serving.goal import validate_engine_goal

    changes = {"budget": budget, "max_evaluations": max_evaluations}
    goal = validate_engine_goal({**recorded, **{k: v for k, v in changes.items()
                                                if v is not None}}, f"run {run_id}")
    _finish(goal, lambda: run_engine_goal(goal, store, workdir, _printer(as_json),
                                          started=command_started(), resume=run_id,
                                          use_lessons=use_lessons),
            fail_if_no_champion, as_json)


def _printer(as_json: bool) -> Callable[[str], None]:
    """The factory's progress lines: on stderr when stdout carries the JSON."""
    out = errors if as_json else console
    return lambda line: out.print(line, highlight=False)


def _finish(goal: Any, run: Callable[[], Any], fail_if_no_champion: bool,
            as_json: bool = False) -> None:
    try:
        result = run()
    except KeyboardInterrupt:  # the factory has recorded the run as interrupted
        raise typer.Exit(130) from None
    if as_json:
        gain = result.gain
        print_json({"run": result.run_id, "kind": "engine", "evaluations": result.evaluations,
                    "default": result.default_id, "champion": result.champion_id,
                    "champion_settings": result.champion_settings, "metric": goal.metric,
                    "gain": None if gain is None else [gain.median, gain.low, gain.high],
                    "default_metric": result.default_metric,
                    "champion_metric": result.champion_metric})
        if fail_if_no_champion and result.champion_id == result.default_id:
            raise typer.Exit(1)
        return
    if result.champion_id == result.default_id:
        console.print(f"run {result.run_id}: the default settings stay champion after "
                      f"{result.evaluations} evaluation(s)", highlight=False)
        if fail_if_no_champion:
            raise typer.Exit(1)
        return
    gain = result.gain
    shown = "" if gain is None else (f", {goal.metric} x{gain.median:.2f} "
                                     f"[{gain.low:.2f}, {gain.high:.2f}] over the default")
    serves = ("`swarmfab serve MODEL --recipe DIR/engine_recipe` serves with it"
              if goal.engine == "swarmfab" else
              f"`DIR/engine_recipe/serve.sh MODEL` runs {goal.engine} with it")
    console.print(f"run {result.run_id}: champion {result.champion_id}{shown}; "
                  f"`swarmfab export {result.run_id} --out DIR` writes its recipe, "
                  f"{serves}", highlight=False)
