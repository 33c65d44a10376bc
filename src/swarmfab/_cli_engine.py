"""``swarmfab run`` of an engine goal (``kind = "engine"``): the engine factory."""

from __future__ import annotations

from pathlib import Path

import typer

from swarmfab._cli_common import STARTED, console

__all__ = ["run_engine"]


def run_engine(path: Path, *, budget: str | None, db: Path, workdir: Path,
               seed: int | None, threads: int | None, max_evaluations: int | None,
               fail_if_no_champion: bool) -> None:
    from swarmfab.knowledge import Store
    from swarmfab.serving.factory import run_engine_goal
    from swarmfab.serving.goal import load_engine_goal

    goal = load_engine_goal(path, budget=budget, seed=seed, threads=threads,
                            max_evaluations=max_evaluations)
    result = run_engine_goal(goal, Store(str(db)), workdir,
                             lambda line: console.print(line, highlight=False),
                             started=STARTED)
    if result.champion_id == result.default_id:
        console.print(f"run {result.run_id}: the default settings stay champion after "
                      f"{result.evaluations} evaluation(s)", highlight=False)
        if fail_if_no_champion:
            raise typer.Exit(1)
        return
    gain = result.gain
    shown = "" if gain is None else (f", {goal.metric} x{gain.median:.2f} "
                                     f"[{gain.low:.2f}, {gain.high:.2f}] over the default")
    console.print(f"run {result.run_id}: champion {result.champion_id}{shown}; "
                  f"`swarmfab export {result.run_id} --out DIR` writes its recipe, "
                  "`swarmfab serve MODEL --recipe DIR` serves with it", highlight=False)
