"""The ``swarmfab`` command line: the typer app and where each command lives.

Commands are defined beside what they share (``_cli_run``: run and resume; ``_cli_bench``:
verify, bench, bench-policy; ``_cli_peaks``: peaks; ``_cli_show``: show and report;
``_cli_serve``: serve, loadgen, dashboard; ``corpus_cli``, ``lessons_cli``) and registered
here; those modules never import this one. Each imports torch, pydantic or the store only
inside the commands that need them, so ``swarmfab --help`` answers at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmfab import lessons_cli
from swarmfab._cli_bench import bench, bench_policy, verify
from swarmfab._cli_common import DEFAULT_DB, STARTED, DbOption, console, friendly
from swarmfab._cli_peaks import peaks
from swarmfab._cli_refresh import refresh
from swarmfab._cli_run import resume, run
from swarmfab._cli_serve import _kda_slots, dashboard, loadgen, serve
from swarmfab._cli_show import report, show
from swarmfab._cli_suite import suite
from swarmfab.corpus_cli import corpus_app

__all__ = [  # the app, and what tests and scripts import from here
    "STARTED", "_kda_slots", "app", "bench", "bench_policy", "dashboard", "export", "loadgen",
    "peaks", "refresh", "report", "resume", "run", "runs", "serve", "show", "verify",
]

app = typer.Typer(
    name="swarmfab", no_args_is_help=True, add_completion=False,
    help="A self-improving factory for verified AI inference kernels.",
)


@friendly
def export(
    run_id: Annotated[str | None, typer.Argument(help="Run id or latest (default: latest).")
                      ] = None,
    out: Annotated[Path, typer.Option(help="Directory to write.")] = Path("champion"),
    name: Annotated[str | None, typer.Option(
        help="Python package name (default: WORKLOAD_champion).")] = None,
    db: DbOption = DEFAULT_DB,
) -> None:
    """Write a run's champion as an installable package with provenance and evidence (an
    engine run's: its serving recipe)."""
    from swarmfab.knowledge import Store
    from swarmfab.report.export import export_champion

    where = export_champion(Store(db), run_id, out, name)
    if (where / "recipe.json").is_file():  # an engine run's recipe
        console.print(f"engine recipe exported to {where}: `swarmfab serve MODEL --recipe "
                      f"{where}`; evidence in EVIDENCE.md and provenance.json",
                      highlight=False)
        return
    console.print(f"champion exported to {where}: `pip install {where}`, then import it; "
                  "evidence in VERIFICATION.md and provenance.json")


@friendly
def runs(db: DbOption = DEFAULT_DB) -> None:
    """List the runs in the store; a champion found stale by `refresh` is marked."""
    from swarmfab.knowledge import Store
    from swarmfab.knowledge.generations import Generations

    store = Store(db)
    generations = Generations(store)
    for record in store.runs():
        generation = generations.of(record.id)
        mark = "" if generation.state == "unchecked" else f" {generation.state}"
        mark += f" -> {generation.successor}" if generation.successor else ""
        console.print(f"{record.id}  {record.workload:<8} {record.status:<12} "
                      f"champion={record.champion_id}{mark}", highlight=False)


app.command("lessons")(lessons_cli.lessons)
app.command()(run)
app.command()(resume)
app.command()(verify)
app.command()(bench)
app.command()(peaks)
app.command()(export)
app.command()(report)
app.command()(show)
app.command()(runs)
app.command()(refresh)
app.command()(dashboard)
app.command()(serve)
app.command()(loadgen)
app.command("bench-policy")(bench_policy)
app.command()(suite)
app.add_typer(corpus_app, name="corpus")

