"""``swarmfab corpus``: inspect and extend a workload's validation corpus."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from swarmfab.cli._common import DEFAULT_DB, DbOption, JsonOption, console, friendly, parse_shape
from swarmfab.errors import GoalError, StoreError

if TYPE_CHECKING:
    from swarmfab.knowledge import Store
    from swarmfab.workloads import Case

corpus_app = typer.Typer(help="Inspect and extend the validation corpus.", no_args_is_help=True)


def _all_cases(workload: str, store: Store) -> list[Case]:
    from swarmfab.workloads import get_workload

    return [*get_workload(workload).validation_cases(), *store.cases(workload)]


@corpus_app.command("list")
@friendly
def list_cases(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
) -> None:
    """Every case of the corpus: built-in ones, then stored ones (added or found), with
    the run that found each and how many later candidates it rejected."""
    from swarmfab.knowledge import Store

    store = Store(db)
    cases = _all_cases(workload, store)
    found = {name: run for name, _, _, run in store.case_history(workload)}
    rejected = store.case_rejections(workload)
    if as_json:
        print(json.dumps([{**case.to_dict(), "found_by_run": found.get(case.name),
                           "rejected_later": rejected.get(case.name, 0)} for case in cases],
                         indent=2))
        return
    by_run: dict[str, int] = {}
    for run in found.values():
        if run is not None:
            by_run[run] = by_run.get(run, 0) + 1
    table = Table(title=f"{workload} corpus: {len(cases)} cases", title_justify="left")
    for column in ("name", "shape", "distribution", "seed", "origin", "found by run",
                   "rejected later"):
        table.add_column(column, justify="right" if column == "rejected later" else "left")
    for case in cases:
        d = case.distribution
        dist = f"g/{d.gate_divisor:g} zero {d.gate_zero_prob:g} beta {d.beta} x{d.magnitude:g}"
        table.add_row(case.name, case.shape.label, dist, str(case.seed), case.origin,
                      found.get(case.name) or "-", str(rejected.get(case.name, 0)))
    console.print(table)
    for run, count in by_run.items():
        console.print(f"run {run} added {count} counterexample case(s)", highlight=False)


@corpus_app.command("show")
@friendly
def show_case(
    workload: Annotated[str, typer.Argument(help="Workload name.")],
    name: Annotated[str, typer.Argument(help="Case name (see `corpus list`).")],
    db: DbOption = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the case as JSON (as it is printed without it too).")] = False,
) -> None:
    """One case as JSON (shape, distribution, seed, origin)."""
    from swarmfab.knowledge import Store

    case = next((c for c in _all_cases(workload, Store(db)) if c.name == name), None)
    if case is None:
        raise StoreError(f"no case {name!r} in the {workload} corpus")
    print(json.dumps(case.to_dict(), indent=2))


@corpus_app.command("add")
@friendly
def add_case(
    workload: Annotated[str, typer.Argument(help="Workload name.")],
    shape: Annotated[str, typer.Option(help="B,T,H,K,V[,HV][+h0|+poolN]")],
    name: Annotated[str | None, typer.Option(help="Case name (default: from the shape).")] = None,
    initial_state: Annotated[bool, typer.Option(help="Start from a random state.")] = False,
    gate_divisor: Annotated[float, typer.Option(help="g = logsigmoid(randn) / n.")] = 1.0,
    gate_zero_prob: Annotated[float, typer.Option(help="Probability a gate is 0.")] = 0.0,
    beta: Annotated[str, typer.Option(help="sigmoid, near0 or near1.")] = "sigmoid",
    magnitude: Annotated[float, typer.Option(help="Scale of v and the state.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the values.")] = 0,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
) -> None:
    """Add a case; every later verification and run of the workload replays it (--json:
    the case added, as `corpus show` prints it)."""
    from swarmfab.knowledge import Store
    from swarmfab.workloads import Case, Distribution, get_workload

    get_workload(workload)
    parsed = parse_shape(shape)
    parsed = dataclasses.replace(parsed, initial_state=initial_state or parsed.initial_state)
    if beta not in ("sigmoid", "near0", "near1"):
        raise GoalError(f"--beta {beta!r}: allowed values are sigmoid, near0, near1")
    if gate_divisor <= 0 or not 0 <= gate_zero_prob <= 1:
        raise GoalError("--gate-divisor must be > 0 and --gate-zero-prob within [0, 1]")
    kind: Literal["sigmoid", "near0", "near1"] = beta  # type: ignore[assignment]
    case = Case(name or f"user {parsed.label} seed {seed}", parsed,
                Distribution(gate_divisor, gate_zero_prob, kind, magnitude), seed, "user")
    if not Store(db).add_case(workload, case):
        raise StoreError(f"the {workload} corpus already has a case named {case.name!r}")
    if as_json:
        print(json.dumps(case.to_dict(), indent=2))
        return
    console.print(f"added {case.name!r} to the {workload} corpus")
