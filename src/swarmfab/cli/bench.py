"""``swarmfab verify``, ``bench`` and ``bench-policy``: one candidate judged or timed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from swarmfab.cli._common import (
    DEFAULT_DB,
    RUN_HELP,
    AllowWeakSandboxOption,
    DbOption,
    JsonOption,
    console,
    errors,
    friendly,
    parse_shape,
    print_json,
)
from swarmfab.errors import GoalError

if TYPE_CHECKING:
    from swarmfab.evaluation import Evaluator
    from swarmfab.knowledge import Store
    from swarmfab.records import Candidate, Verdict

__all__ = ["bench", "bench_policy", "verify"]

DtypeOption = Annotated[str, typer.Option(
    help="float32, or bfloat16: q, k, v and beta given in bfloat16 as fla's users pass "
         "them (the state stays float32; the bfloat16 tolerances apply).")]


@friendly
def verify(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    file: Annotated[Path, typer.Argument(help="Candidate: a .c, .cu or .py file.")],
    as_json: JsonOption = False,
    threads: Annotated[int | None, typer.Option(help="Threads for the candidate.")] = None,
    fuzz: Annotated[int, typer.Option(
        min=0, help="Random cases added to the corpus cases.")] = 8,
    backend: Annotated[str | None, typer.Option(
        help="c, python, numba, torch-compile, cuda or triton (default: from the suffix).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the fuzzing draws.")] = 0,
    fast: Annotated[bool, typer.Option(
        "--fast", help="Only the fast corpus every evaluation meets (no battery).")] = False,
    dtype: DtypeOption = "float32",
    db: DbOption = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
    allow_weak_sandbox: AllowWeakSandboxOption = False,
) -> None:
    """Verify a candidate file: corpus, fuzzing, the battery, anti-cheat probes. Exit 0
    if accepted.

    The battery (real sizes, extreme values, strided and column-major inputs, one and
    several threads) follows the fast corpus unless --fast. A C file is built with the
    flags its header records (`/* swarmfab flags: ... */`, as a champion's source carries
    them), else -O3 -march=native. A fuzzing or battery case that breaks the candidate is
    added to the stored corpus.
    """
    import random

    from swarmfab.backends import cuda_device_available, get_backend
    from swarmfab.backends.files import candidate_from_file
    from swarmfab.goal import default_goal
    from swarmfab.knowledge import Store
    from swarmfab.records import Status
    from swarmfab.swarm.launch import evaluator_for
    from swarmfab.verify import draw_cases

    candidate = candidate_from_file(workload, file, backend)
    # GPU candidates run on the device where there is one (elsewhere they still build,
    # so compile errors are reported, and loading says why it cannot run)
    on_gpu = get_backend(candidate.backend).device == "cuda" and cuda_device_available()
    goal = default_goal(workload).with_overrides(threads=threads, dtype=dtype,
                                                 device="cuda" if on_gpu else None,
                                                 allow_weak_sandbox=allow_weak_sandbox or None)
    store = Store(db)
    evaluator = evaluator_for(goal, workdir, store)
    drawn = draw_cases(evaluator.workload, random.Random(seed), fuzz)
    battery = [] if fast else evaluator.battery.cases()
    verdict = evaluator.verify(candidate, [*evaluator.cases, *drawn])
    if verdict.status is Status.ACCEPTED and battery:  # the second tier, once the first holds
        verdict = evaluator.verify_battery(candidate, verdict)
    failed = verdict.failed_check
    found = evaluator.case_of(failed, [*drawn, *battery]) if failed else None
    origin = "battery" if found is not None and found.name in {c.name for c in battery} \
        else "fuzz"
    for name, why in evaluator.battery.left_out if not fast else ():
        errors.print(f"battery case left out: {name}: {why}", highlight=False, markup=False)
    if found is not None and store.add_case(
        workload, dataclasses.replace(found, origin=f"{origin}: broke {file.name}")
    ):
        errors.print(f"counterexample {found.name} ({found.shape.label}) added to the corpus",
                     highlight=False, markup=False)
    if as_json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        _print_verdict(candidate, verdict)
    raise typer.Exit(0 if verdict.status is Status.ACCEPTED else 1)


def _print_verdict(candidate: Candidate, verdict: Verdict) -> None:
    """The verdict for a person: every check in a table, or, when none ran (the build
    failed, the file did not load), why, with the diagnostics once."""
    from swarmfab.report import verdict_table

    flags = f"; flags {' '.join(candidate.flags)}" if candidate.flags else ""
    console.print(f"candidate {candidate.id}: {candidate.entry} ({candidate.backend}{flags})",
                  highlight=False, markup=False)
    if verdict.isolation.level:
        console.print(f"isolation: {verdict.isolation.describe()}", highlight=False,
                      markup=False)
    if verdict.checks:
        console.print(verdict_table(verdict))
        for line in verdict.diagnostics:
            console.print(line, highlight=False, markup=False)
        return
    reason, diagnostics = verdict.reason, verdict.diagnostics
    head, _, quoted = reason.partition(": ")
    if diagnostics and quoted and quoted in "\n".join(diagnostics):
        reason = head  # the reason quotes the first diagnostic: show it once, below
    console.print(f"verdict: {verdict.status.value} — {reason}" + (":" if diagnostics else ""),
                  highlight=False, markup=False)
    for diagnostic in diagnostics:  # parsed messages, or the compiler's raw output
        for line in diagnostic.strip().splitlines():
            console.print(f"  {line}", highlight=False, markup=False)


@friendly
def bench(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    candidate: Annotated[str | None, typer.Option(
        help="A candidate file, 'champion' (of --run, default latest) or 'default' "
             "(the design space's starting point).")] = None,
    run_id: Annotated[str | None, typer.Option(
        "--run", metavar="RUN",
        help=f"The run whose champion --candidate champion times: {RUN_HELP[0].lower()}"
             f"{RUN_HELP[1:]} (the default). An option here, as the positional argument "
             "is the workload.")] = None,
    shape: Annotated[list[str] | None, typer.Option(
        help="B,T,H,K,V[,HV][+h0|+poolN] (+h0: with an initial state; +poolN: states "
             "updated in place in a pool of N); repeatable.")] = None,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    cold: Annotated[bool, typer.Option(help="Flush the caches before every sample.")] = False,
    baseline: Annotated[list[str] | None, typer.Option(
        help="Baselines to time (repeatable; default: the standard ones; torch-compile "
             "is opt-in: it compiles for a while in every job).")] = None,
    device: Annotated[str, typer.Option(
        help="cpu, or cuda: time on the CUDA device (CUDA events, L2 flushed; the "
             "default baselines are then fla's kernels where fla is installed).")] = "cpu",
    dtype: DtypeOption = "float32",
    backend: Annotated[str | None, typer.Option(
        help="A candidate file's backend: c, python, numba, torch-compile, cuda or triton "
             "(default: from the suffix; a .py Triton file needs triton).")] = None,
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
    against_itself: Annotated[bool, typer.Option(
        "--against-itself",
        help="Time the candidate against a copy of itself, as a run's evaluations time a "
             "candidate against its incumbent (an A/A check of this host's timing); exit "
             "1 if any shape reads faster or slower.")] = False,
    allow_weak_sandbox: AllowWeakSandboxOption = False,
) -> None:
    """Time baselines (and a candidate) side by side: medians, CIs, speedups, roofline."""
    from swarmfab.backends import get_backend
    from swarmfab.evaluation import Implementation
    from swarmfab.goal import default_goal
    from swarmfab.knowledge import Store
    from swarmfab.measure import CONFIRMATION
    from swarmfab.measure.timer import last_level_cache_bytes
    from swarmfab.report import bench_table
    from swarmfab.swarm.hosts import host_peaks
    from swarmfab.swarm.launch import evaluator_for, require_device
    from swarmfab.workloads import get_workload

    goal = default_goal(workload).with_overrides(threads=threads, device=device, dtype=dtype,
                                                 allow_weak_sandbox=allow_weak_sandbox or None)
    require_device(goal.device)
    shapes = [parse_shape(s) for s in shape] if shape else None
    spec = get_workload(goal.workload)
    known = spec.baselines()
    names = baseline or spec.default_baselines(goal.device)
    unknown = [name for name in names if name not in known]
    if unknown:  # before anything is measured
        raise GoalError(f"--baseline {', '.join(unknown)}: {workload} has {', '.join(known)}")
    if against_itself and (candidate is None or cold or baseline):
        raise GoalError("--against-itself times a candidate (--candidate) against a copy of "
                        "itself as a run's evaluations do: no baselines, warm caches")
    store = Store(db)
    chosen = None
    if candidate is not None:  # a file that is not there is a usage error: say so first
        chosen = _bench_candidate(store, workload, candidate, run_id, goal.threads, goal.device,
                                  backend)
        # a GPU candidate on a host without a device: the reason, before anything is built
        # (verify still builds it, for its compile errors)
        get_backend(chosen.backend).require_device()
    evaluator = evaluator_for(goal, workdir, store, shapes)
    evaluator.peaks = host_peaks(store, goal.threads, evaluator.limits, device=goal.device)
    contenders = []
    if chosen is not None:
        verdict = evaluator.verify(chosen)
        if verdict.status.value != "accepted":
            errors.print(f"[red]the candidate is not verified:[/] {escape(verdict.reason)}")
            raise typer.Exit(1)
        if against_itself:
            _against_itself(evaluator, chosen, workload, as_json)
            return
        contenders.append(Implementation("candidate", artifact=evaluator.build(chosen),
                                         source=chosen))
    contenders += [Implementation(n, baseline=n) for n in names]
    flush = 2 * last_level_cache_bytes() if cold else 0
    tables = evaluator.side_by_side(contenders, dataclasses.replace(CONFIRMATION,
                                                                   flush_bytes=flush))
    if as_json:
        print(json.dumps([_side_json(t, goal.dtype) for t in tables], indent=2))
    else:
        title = (f"{workload}: side by side, {goal.threads} thread(s), "
                 f"{'cold' if cold else 'warm'} cache")
        if goal.device == "cuda":
            title = f"{workload}: side by side on the CUDA device (L2 flushed before every sample)"
        if goal.dtype != "float32":
            title += f", inputs in {goal.dtype} (the state in float32)"
        console.print(bench_table(tables, title))


def _against_itself(evaluator: Evaluator, candidate: Candidate, workload: str,
                    as_json: bool) -> None:
    """An A/A check: the verified ``candidate`` timed against a copy of itself, each in a
    session of its own, as a run's evaluation times it against an incumbent. Every shape
    should read "indistinguishable"; exit 1 where one does not (a false "faster" could
    crown a tie, a false "slower" would block a real gain): a bias between the two
    processes, or other processes' load."""
    from swarmfab.evaluation import Implementation
    from swarmfab.records import Status
    from swarmfab.report import against_itself_table
    from swarmfab.swarm.gate import judge

    copy = Implementation("copy", artifact=evaluator.build(candidate))
    verdict = evaluator.rematch(candidate, {case.shape.label: copy
                                            for case in evaluator.targets})
    if verdict.status is not Status.ACCEPTED:
        errors.print(f"[red]the candidate could not be timed:[/] {escape(verdict.reason)}")
        raise typer.Exit(1)
    decision = judge(verdict)
    misread = [f"{t.shape} ({t.comparison})" for t in verdict.timings
               if t.comparison != "indistinguishable"]
    if as_json:
        print(json.dumps({"timings": verdict.to_dict()["timings"], "misread": misread,
                          "crowned": decision.promote, "gate": decision.reason}, indent=2))
    else:
        console.print(against_itself_table(
            verdict, f"{workload}: candidate {candidate.id} against a copy of itself, "
                     f"{evaluator.threads} thread(s), as a run's evaluations time it"))
        verdict_line = (f"the gate would crown the copy ({decision.reason})" if decision.promote
                        else f"the gate would not crown the copy ({decision.reason})")
        if misread:
            console.print(f"[red]{escape(verdict_line)}; it reads a difference where there "
                          f"is none on {escape(', '.join(misread))}[/]: comparisons on this "
                          "host are not to be trusted to that margin now; look for other "
                          "processes' load (uptime) and run it again", highlight=False)
        else:
            console.print(verdict_line, highlight=False, markup=False)
    raise typer.Exit(1 if misread else 0)


def _bench_candidate(store: Store, workload: str, which: str, run_id: str | None,
                     threads: int, device: str = "cpu", backend: str | None = None) -> Any:
    from swarmfab.errors import StoreError
    from swarmfab.workloads import design_space

    if which == "default":
        space = design_space(workload, device)
        return space.instantiate(space.default(), threads=threads)
    if which == "champion":
        record = store.run(run_id)
        if record.champion_id is None:
            raise StoreError(f"run {record.id} has no champion")
        return store.candidate(record.champion_id)
    from swarmfab.backends.files import candidate_from_file

    return candidate_from_file(workload, Path(which), backend)


def _side_json(table: Any, dtype: str) -> dict[str, Any]:
    """``dtype``: what the inputs were given in (the state is float32 either way)."""
    def est(e: Any) -> dict[str, float]:
        return {"median": e.median, "low": e.low, "high": e.high}

    return {"shape": table.shape, "dtype": dtype, "reference": table.reference,
            "samples": table.samples,
            "cache": table.cache, "roofline_bound_s": table.bound_s,
            "seconds": {n: est(e) for n, e in table.seconds.items()},
            "ratio_to_reference": {n: est(e) for n, e in table.ratio_to_reference.items()},
            "minor_faults_per_call": table.faults,
            # a memory-bound shape: its compulsory bytes updated in place, timed beside
            # (the roofline bound's memory term)
            "memory_stream_s": None if table.memory_s is None else est(table.memory_s)}


@friendly
def bench_policy(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    shape: Annotated[str, typer.Option(
        help="B,T,H,K,V[,HV][+h0|+poolN]: the one shape every candidate is timed on.")]
        = "1,512,4,128,128",
    seeds: Annotated[int, typer.Option(min=1, help="Searches per policy.")] = 3,
    max_evaluations: Annotated[int, typer.Option(
        min=1, help="Evaluations per search (the same for every policy).")] = 30,
    target: Annotated[float, typer.Option(
        min=0.01, max=1.0, help="Share of the best-known speed a champion must reach.")] = 0.9,
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    db: DbOption = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
    as_json: JsonOption = False,
) -> None:
    """The built-in agents against uniform random search over the same design space
    (--json: the table on stdout, each candidate's timing on stderr)."""
    from swarmfab.goal import default_goal
    from swarmfab.knowledge import Store
    from swarmfab.report import policy_table
    from swarmfab.swarm.launch import evaluator_for
    from swarmfab.swarm.policy_bench import SpeedOracle, compare_policies, summary
    from swarmfab.workloads import design_space

    goal = default_goal(workload).with_overrides(threads=threads)
    space = design_space(workload)
    evaluator = evaluator_for(goal, workdir, Store(db), [parse_shape(shape)])
    reference = space.instantiate(space.default(), threads=goal.threads)
    out = errors if as_json else console
    oracle = SpeedOracle(evaluator, evaluator.cases, reference,
                         log=lambda line: out.print(line, highlight=False))
    results = compare_policies(space, goal, oracle, range(seeds), max_evaluations)
    best, rows = summary(results, target, max_evaluations)
    if as_json:
        print_json({"workload": workload, "shape": shape, "threads": goal.threads,
                    "seeds": seeds, "max_evaluations": max_evaluations, "target": target,
                    "best_known_s": best, "distinct_candidates": len(oracle.seconds),
                    "policies": [{"policy": policy, "evaluations_per_seed": counts,
                                  "median": median} for policy, counts, median in rows]})
        return
    console.print(policy_table(rows, best, target, max_evaluations, len(oracle.seconds),
                               f"{workload} {shape}, {goal.threads} thread(s)"))
