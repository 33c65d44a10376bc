"""``swarmfab refresh``: keep the store's champions current on this host and software."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from swarmfab.cli._common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    command_started,
    console,
    friendly,
)
from swarmfab.errors import GoalError

if TYPE_CHECKING:
    from swarmfab.swarm.refresh import Check

__all__ = ["refresh"]


@friendly
def refresh(
    workload: Annotated[str | None, typer.Option(
        help="Only the champions of this workload (default: every champion).")] = None,
    budget: Annotated[str, typer.Option(
        help="Wall time of the whole command: checks first, then successors share the "
             "rest.")] = "10m",
    max_evaluations: Annotated[int | None, typer.Option(
        min=1, help="Evaluations per successor run at most.")] = None,
    check_only: Annotated[bool, typer.Option(
        "--check-only", help="Check and record, start no successor runs.")] = False,
    db: DbOption = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(help="Build cache and champions.")] = Path(".swarmfab"),
    as_json: JsonOption = False,
) -> None:
    """Check that every champion still applies here (ISA, compiler, torch, corpus, speed);
    a stale one gets a short new run from what the store knows, kept as its successor.

    Every check is recorded; nothing recorded is changed. `swarmfab show` and `runs` mark
    stale champions and their successors.
    """
    from swarmfab.goal import parse_duration
    from swarmfab.knowledge import Store
    from swarmfab.swarm.launch import evaluator_for
    from swarmfab.swarm.refresh import refresh_champions, to_check

    try:
        seconds = parse_duration(budget)
    except ValueError as exc:
        raise GoalError(f"--budget {budget!r}: {exc}") from None
    store = Store(db)
    runs = to_check(store, workload)
    if not runs:
        which = f"of {workload} " if workload else ""
        console.print(f"no champion {which}in the store at {db} to check", highlight=False)
        return
    deadline = command_started() + seconds
    out = _Quiet() if as_json else console
    checks = refresh_champions(
        store, runs, deadline, lambda goal: evaluator_for(goal, workdir, store),
        None if check_only else _successor(store, workdir, max_evaluations, out),
        lambda line: out.print(line, highlight=False, markup=False))
    if as_json:
        print(json.dumps([check.to_dict() for check in checks], indent=2, default=str))
        return
    console.print(_table(checks))


def _successor(store: Any, workdir: Path, max_evaluations: int | None, out: Any) -> Any:
    from swarmfab.cli._common import execute_goal

    def start(goal: Any, seconds: float) -> tuple[str, str | None]:
        goal = goal.with_overrides(budget=seconds, max_evaluations=max_evaluations)
        result, _ = execute_goal(goal, store, workdir, None, started=time.monotonic(), out=out)
        return result.run_id, result.champion.id if result.champion else None

    return start


class _Quiet:
    """A console that drops progress lines (``--json`` prints one document)."""

    is_terminal = False

    def print(self, *args: Any, **kwargs: Any) -> None:
        pass


def _table(checks: list[Check]) -> Table:
    table = Table(title=f"refresh: {len(checks)} champion(s) checked", title_justify="left")
    for column in ("run", "workload", "champion", "state", "why", "now / recorded",
                   "successor"):
        table.add_column(column)
    for check in checks:
        figures = "; ".join(
            f"{f['shape']}: {f['now'][0]:.2f}x"
            + (f" / {f['recorded'][0]:.2f}x" if f.get("recorded") else "")
            for f in check.figures)
        successor = (f"run {check.successor} (champion {check.successor_champion or 'none'})"
                     if check.successor else check.note)
        table.add_row(check.run_id, check.workload, check.candidate_id[:12], check.state,
                      "\n".join(check.reasons) or "-", figures or "-", successor or "-")
    return table
