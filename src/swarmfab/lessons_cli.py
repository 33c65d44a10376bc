"""``swarmfab lessons``: what earlier runs learned about knob moves, and the evidence."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from swarmfab._cli_common import DbOption, JsonOption, console, friendly
from swarmfab.knowledge import DEFAULT_DB, Store
from swarmfab.knowledge.lessons import family_of, summarise
from swarmfab.records import Lesson

__all__ = ["lessons"]


@friendly
def lessons(
    workload: Annotated[str | None, typer.Option(
        help="Only lessons that apply to this workload (its family: kda and gdn share).")
    ] = None,
    db: DbOption = str(DEFAULT_DB),
    as_json: JsonOption = False,
) -> None:
    """Lessons per context (workload, device class, shape class), merged across runs, with
    the runs and the child/parent candidate pairs behind each."""
    store = Store(db)
    rows = store.lesson_evidence(family_of(workload) if workload else None)
    listed = summarise(rows)
    if as_json:
        print(json.dumps([{"context": context, **lesson.to_dict()}
                          for context, lesson in listed], indent=2))
        return
    if not listed:
        console.print("no lessons yet: they are drawn from the single-knob child/parent pairs "
                      "of runs when those runs finish")
        return
    console.print(_table(listed, workload))


def _table(listed: list[tuple[str, Lesson]], workload: str | None) -> Table:
    title = f"lessons{' for ' + workload if workload else ''}: time ratio child/parent " \
            "(below 1: the move made the kernel faster)"
    table = Table(title=title, title_justify="left")
    for column in ("context", "move", "outcome", "time ratio [95% CI]", "pairs", "failed",
                   "runs", "candidates (child<-parent)"):
        table.add_column(column)
    for context, lesson in listed:
        e = lesson.effect
        effect = "-" if e is None else f"{e.median:.2f} [{e.low:.2f}, {e.high:.2f}]"
        pairs = ", ".join(f"{child[:8]}<-{parent[:8]}" for child, parent in lesson.candidates[:3])
        more = len(lesson.candidates) - 3
        table.add_row(context, lesson.move, lesson.outcome, effect, str(lesson.pairs),
                      str(lesson.failures), ", ".join(lesson.runs),
                      pairs + (f" (+{more})" if more > 0 else ""))
    return table
