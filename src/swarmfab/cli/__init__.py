"""The ``swarmfab`` command line: the typer app, one module per command group.

``run`` (run, resume), ``bench`` (verify, bench, bench-policy), ``show`` (show, report,
runs, export), ``serve`` (serve, loadgen, dashboard), ``suite``, ``refresh``, ``peaks``,
``corpus``, ``lessons``, ``doctor``, ``model``; ``engine`` runs an engine goal for
``run`` and ``resume``; ``_common`` holds what they share. A command parses, calls one
function below the command layer, and prints; nothing outside this package imports it.
Each module imports torch, pydantic or the store only inside the commands that need
them, so ``swarmfab --help`` answers at once.
"""

from __future__ import annotations

from typing import Annotated

import typer

from swarmfab.cli._common import STARTED
from swarmfab.cli.bench import bench, bench_policy, verify
from swarmfab.cli.corpus import corpus_app
from swarmfab.cli.doctor import doctor
from swarmfab.cli.lessons import lessons
from swarmfab.cli.model import model
from swarmfab.cli.peaks import peaks
from swarmfab.cli.refresh import refresh
from swarmfab.cli.run import resume, run
from swarmfab.cli.serve import _kda_slots, dashboard, loadgen, serve
from swarmfab.cli.show import export, report, runs, show
from swarmfab.cli.suite import suite

__all__ = [  # the app, and what tests and scripts import from here
    "STARTED", "_kda_slots", "app", "bench", "bench_policy", "dashboard", "export", "loadgen",
    "model", "peaks", "refresh", "report", "resume", "run", "runs", "serve", "show", "verify",
]

app = typer.Typer(
    name="swarmfab", no_args_is_help=True, add_completion=False,
    help="A self-improving factory for verified AI inference kernels.",
)


def _print_version(asked: bool) -> None:
    if not asked:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("swarmfab")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from swarmfab import __version__ as installed
    typer.echo(f"swarmfab {installed}")
    raise typer.Exit()


@app.callback()
def main(
    show_version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the installed version and exit.")] = False,
) -> None:
    """A self-improving factory for verified AI inference kernels."""


app.command()(lessons)
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
app.command()(model)
app.command()(doctor)
app.add_typer(corpus_app, name="corpus")

