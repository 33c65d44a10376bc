"""``swarmfab lessons``: what earlier runs learned about knob moves, and the evidence;
then the champion settings a new run of the same family would start from."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from swarmfab.cli._common import DEFAULT_DB, DbOption, JsonOption, console, friendly

if TYPE_CHECKING:
    from swarmfab.knowledge.recall import Champion
    from swarmfab.records import Lesson

__all__ = ["lessons"]


@friendly
def lessons(
    workload: Annotated[str | None, typer.Option(
        help="Only lessons that apply to this workload (its family: kda and gdn share).")
    ] = None,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
) -> None:
    """Lessons per context (workload, device class, shape class), merged across runs, with
    the runs and the child/parent candidate pairs behind each."""
    from swarmfab.knowledge import Store
    from swarmfab.knowledge.lessons import family_of, summarise

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
    else:
        console.print(_table(listed, workload))
    families = [family_of(workload)] if workload else sorted(
        {family_of(run.workload) for run in store.runs()})
    champions = [champion for family in families for champion in store.champions(family)]
    if champions:
        console.print(_champions_table(champions))


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


def _champions_table(champions: list[Champion]) -> Table:
    from swarmfab.knowledge.lessons import device_class

    table = Table(title="champions: the settings a related new run proposes first (most "
                  "similar context first; --no-lessons skips them)", title_justify="left")
    for column in ("run", "workload", "device class", "shapes", "setting"):
        table.add_column(column)
    for champion in champions:
        setting = ", ".join(f"{name}={value}" for name, value in champion.knobs.items())
        table.add_row(champion.run_id, champion.workload, device_class(champion.host),
                      ", ".join(champion.shape_labels), setting or "(hand-written)")
    return table
