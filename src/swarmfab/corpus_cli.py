"""``swarmfab corpus``: inspect and extend a workload's validation corpus."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

from swarmfab.errors import GoalError, StoreError, SwarmfabError
from swarmfab.knowledge import DEFAULT_DB, Store
from swarmfab.workloads import Case, Distribution, get_workload

corpus_app = typer.Typer(help="Inspect and extend the validation corpus.", no_args_is_help=True)
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 140)
errors = Console(stderr=True, soft_wrap=True, width=None if sys.stdout.isatty() else 140)

DbOption = Annotated[str, typer.Option("--db", help="SQLite path or SQLAlchemy URL of the store.")]


def _all_cases(workload: str, db: str) -> list[Case]:
    return [*get_workload(workload).validation_cases(), *Store(db).cases(workload)]


def _fail(exc: SwarmfabError) -> typer.Exit:
    errors.print(f"[red]error:[/] {exc}", highlight=False)
    return typer.Exit(2 if isinstance(exc, GoalError) else 1)


@corpus_app.command("list")
def list_cases(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    db: DbOption = str(DEFAULT_DB),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every case of the corpus: built-in ones, then stored ones (added or found)."""
    try:
        cases = _all_cases(workload, db)
    except SwarmfabError as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps([case.to_dict() for case in cases], indent=2))
        return
    table = Table(title=f"{workload} corpus: {len(cases)} cases", title_justify="left")
    for column in ("name", "shape", "distribution", "seed", "origin"):
        table.add_column(column)
    for case in cases:
        d = case.distribution
        dist = f"g/{d.gate_divisor:g} zero {d.gate_zero_prob:g} beta {d.beta} x{d.magnitude:g}"
        table.add_row(case.name, case.shape.label, dist, str(case.seed), case.origin)
    console.print(table)


@corpus_app.command("show")
def show_case(
    workload: Annotated[str, typer.Argument(help="Workload name.")],
    name: Annotated[str, typer.Argument(help="Case name (see `corpus list`).")],
    db: DbOption = str(DEFAULT_DB),
) -> None:
    """One case as JSON (shape, distribution, seed, origin)."""
    try:
        case = next((c for c in _all_cases(workload, db) if c.name == name), None)
        if case is None:
            raise StoreError(f"no case {name!r} in the {workload} corpus")
    except SwarmfabError as exc:
        raise _fail(exc) from None
    print(json.dumps(case.to_dict(), indent=2))


@corpus_app.command("add")
def add_case(
    workload: Annotated[str, typer.Argument(help="Workload name.")],
    shape: Annotated[str, typer.Option(help="B,T,H,K,V[,HV][+h0]")],
    name: Annotated[str | None, typer.Option(help="Case name (default: from the shape).")] = None,
    initial_state: Annotated[bool, typer.Option(help="Start from a random state.")] = False,
    gate_divisor: Annotated[float, typer.Option(help="g = logsigmoid(randn) / n.")] = 1.0,
    gate_zero_prob: Annotated[float, typer.Option(help="Probability a gate is 0.")] = 0.0,
    beta: Annotated[str, typer.Option(help="sigmoid, near0 or near1.")] = "sigmoid",
    magnitude: Annotated[float, typer.Option(help="Scale of v and the state.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the values.")] = 0,
    db: DbOption = str(DEFAULT_DB),
) -> None:
    """Add a case; every later verification and run of the workload replays it."""
    from swarmfab.cli import _parse_shape

    try:
        get_workload(workload)
        parsed = _parse_shape(shape)
        parsed = type(parsed)(**{**_fields(parsed),
                                 "initial_state": initial_state or parsed.initial_state})
        if beta not in ("sigmoid", "near0", "near1"):
            raise GoalError(f"--beta {beta!r}: allowed values are sigmoid, near0, near1")
        if gate_divisor <= 0 or not 0 <= gate_zero_prob <= 1:
            raise GoalError("--gate-divisor must be > 0 and --gate-zero-prob within [0, 1]")
        kind: Literal["sigmoid", "near0", "near1"] = beta  # type: ignore[assignment]
        case = Case(name or f"user {parsed.label} seed {seed}", parsed,
                    Distribution(gate_divisor, gate_zero_prob, kind, magnitude), seed, "user")
        if not Store(db).add_case(workload, case):
            raise StoreError(f"the {workload} corpus already has a case named {case.name!r}")
    except SwarmfabError as exc:
        raise _fail(exc) from None
    console.print(f"added {case.name!r} to the {workload} corpus")


def _fields(shape: object) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(shape, f.name) for f in dataclasses.fields(shape)}  # type: ignore[arg-type]
