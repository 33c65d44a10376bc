"""``swarmfab corpus``: inspect and extend a workload's validation corpus."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from swarmfab.cli._common import (
    DEFAULT_DB,
    AllowWeakSandboxOption,
    DbOption,
    JsonOption,
    console,
    errors,
    friendly,
    parse_shape,
)
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


@corpus_app.command("adequacy")
@friendly
def adequacy(
    workload: Annotated[str, typer.Argument(help="Workload name or problem file, e.g. kda.")],
    max_per_class: Annotated[int, typer.Option(
        min=1, help="Mutants judged per class in each half (growth, scoring).")] = 10,
    seed: Annotated[int, typer.Option(
        help="Seed of the split into halves and of the order mutants are taken in.")] = 0,
    budget: Annotated[float | None, typer.Option(
        min=1, help="Seconds after which no further mutant is judged.")] = None,
    operator: Annotated[list[str] | None, typer.Option(
        help="Only these classes of the catalogue (repeatable).")] = None,
    threads: Annotated[int | None, typer.Option(help="Threads for the candidates.")] = None,
    eval_timeout: Annotated[float | None, typer.Option(
        min=1, help="Seconds each verification job may run (default: the goal's).")] = None,
    db: DbOption = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(
        help="Build cache; the verdict cache and the results go under adequacy/.")] = Path(
        ".swarmfab"),
    as_json: JsonOption = False,
    allow_weak_sandbox: AllowWeakSandboxOption = False,
) -> None:
    """Measure verification with mutants: every operator of a fixed catalogue at every
    site of the honest kernels and stored champions, split once into a growth and a
    scoring half. A growth mutant only the battery kills adds its killing case to the
    corpus; the scores (killed / non-equivalent, per tier and class) are the scoring
    half's. Results: adequacy/WORKLOAD.json under --workdir and the store."""
    from swarmfab.evaluation.adequacy import Subject, honest_kernels, measure_adequacy
    from swarmfab.goal import default_goal
    from swarmfab.knowledge import Store
    from swarmfab.report.adequacy import (
        adequacy_line,
        adequacy_notes,
        adequacy_table,
        measurement_key,
    )
    from swarmfab.swarm.launch import evaluator_for
    from swarmfab.verify.mutants import CATALOGUE

    known = {op.name: op for op in CATALOGUE}
    unknown = [name for name in operator or () if name not in known]
    if unknown:
        raise GoalError(f"--operator {', '.join(unknown)}: the classes are "
                        f"{', '.join(known)}")
    operators = tuple(known[name] for name in operator) if operator else CATALOGUE
    goal = default_goal(workload).with_overrides(
        threads=threads, eval_timeout=eval_timeout, allow_weak_sandbox=allow_weak_sandbox or None)
    store = Store(db)
    evaluator = evaluator_for(goal, workdir, store)
    subjects = honest_kernels(evaluator.workload, workload, evaluator.threads)
    for run in store.runs():
        if run.workload == workload and run.champion_id:
            subjects.append(Subject(f"champion of run {run.id}", store.candidate(run.champion_id)))
    name = measurement_key(workload).removeprefix("adequacy ")
    out = workdir / "adequacy"

    def log(line: str) -> None:
        errors.print(line, highlight=False, markup=False)

    result = measure_adequacy(
        evaluator, workload, subjects, seed=seed, max_per_class=max_per_class,
        budget_s=budget, operators=operators,
        grow=lambda case: store.add_case(workload, case), cache_path=out / f"{name}.verdicts.json",
        log=log)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result.to_dict(), indent=2))
    summary = result.summary()
    store.save_measurement(measurement_key(workload), summary)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    console.print(adequacy_table(summary))
    console.print(adequacy_line(summary), highlight=False, markup=False)
    for line in adequacy_notes(summary):
        console.print(line, highlight=False, markup=False)
    console.print(f"written to {out / f'{name}.json'}", highlight=False, markup=False)
