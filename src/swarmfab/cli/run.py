"""``swarmfab run`` and ``swarmfab resume``: a goal, checked, then the swarm on it."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from swarmfab.cli._common import (
    DEFAULT_DB,
    AllowWeakSandboxOption,
    DbOption,
    JsonOption,
    LlmApiKeyEnvOption,
    LlmBaseUrlOption,
    LlmBudgetTokensOption,
    LlmBudgetUsdOption,
    LlmModelOption,
    LlmPriceInputOption,
    LlmPriceOutputOption,
    LlmProviderOption,
    RequiredRunArgument,
    console,
    errors,
    execute_goal,
    friendly,
    print_json,
    say,
)
from swarmfab.errors import ClusterError, GoalError

if TYPE_CHECKING:
    from swarmfab.knowledge import Store

__all__ = ["check_ray_cluster", "refuse_for_engine", "refuse_llm_without_agents", "resume",
           "run"]

RAY_CONNECT_TIMEOUT_S = 3.0
RAY_HELP = ("start one with `ray start --head` (and `ray start --address HEAD:6379` on the "
            "other nodes), then pass --address auto or HOST:PORT")

WorkersOption = Annotated[int | None, typer.Option(
    help="Evaluations at once (default: as many benchmarks as fit on the host's cores).")]
ExecutorOption = Annotated[str, typer.Option(
    help="Where evaluations run: local (a pool on this host) or ray (a Ray cluster).")]
AddressOption = Annotated[str, typer.Option(
    help="Ray cluster address with --executor ray: auto, or HOST:PORT.")]
NoLessonsOption = Annotated[bool, typer.Option(
    "--no-lessons", help="Ignore what earlier runs in the store learned (for comparison).")]
FailIfNoChampionOption = Annotated[bool, typer.Option(
    "--fail-if-no-champion",
    help="Exit 1 when no candidate beat the baselines (default: the baselines are the "
         "answer, exit 0).")]
WorkdirOption = Annotated[Path, typer.Option(help="Build cache and champions.")]
SizesOption = Annotated[str, typer.Option(
    help="A problem file's sizes: auto (halved together until they fit half this host's "
         "memory and the eager Model takes at most 0.1 s a call here) or as-is (refused "
         "if they cannot fit).")]


# what an engine goal (kind = "engine") has no use for, and why
_ENGINE_IGNORES = {
    "--workers": "the engine factory measures one recipe at a time, on a machine doing "
                 "nothing else",
    "--executor": "engine recipes are measured on this host only",
    "--address": "engine recipes are measured on this host only",
    "--agents": "engine recipes are proposed by the factory's own built-in agents",
    "--llm-*": "engine recipes are proposed by the factory's own built-in agents",
    "--sizes": "sizes are a problem file's; an engine goal's traffic sets its load",
}


def _flag(llm_key: str) -> str:
    return "--llm-" + llm_key.replace("_", "-")


def refuse_for_engine(given: dict[str, bool]) -> None:
    """A GoalError naming each option given that an engine goal would ignore, and why."""
    named = [flag for flag, was_given in given.items() if was_given]
    if not named:
        return
    reasons = [f"{flag} ({_ENGINE_IGNORES['--llm-*' if flag.startswith('--llm-') else flag]})"
               for flag in named]
    raise GoalError('not for an engine goal (kind = "engine"): ' + "; ".join(reasons)
                    + "; leave " + ("it" if len(named) == 1 else "them") + " out")


def refuse_llm_without_agents(llm: Mapping[str, object], agents: Sequence[str]) -> None:
    """--llm-* options given to a run without LLM agents would be ignored: refused."""
    named = [_flag(key) for key, value in llm.items() if value is not None]
    if named and "llm" not in agents:
        raise GoalError(f"{', '.join(named)} apply to LLM agents, and this run has none "
                        f"(agents: {', '.join(agents)}); add --agents llm,builtin or leave "
                        + ("it" if len(named) == 1 else "them") + " out")


def _executor_factory(executor: str, address: str) -> Any:
    """The run's executor factory; None means the default local pool. A Ray cluster is
    checked here, before any work: a run must not time its baselines and then find no
    cluster."""
    if executor == "local":
        if address != "auto":
            raise GoalError(f"--address {address}: a Ray cluster's address, for --executor "
                            "ray; this run evaluates on this host (--executor local)")
        return None
    if executor != "ray":
        raise GoalError(f"--executor {executor!r}: choose local or ray")
    check_ray_cluster(address)
    from swarmfab.swarm.ray_executor import RayExecutor

    return lambda evaluator, workers: RayExecutor(evaluator, address, workers)


def check_ray_cluster(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> str:
    """Ray is installed and something listens at the cluster's address (``auto``: the
    cluster `ray start` left on this machine, or RAY_ADDRESS); returns that HOST:PORT.

    ``ray.init`` itself waits minutes for an address nobody answers at; this answers
    within ``timeout_s``. ClusterError says what to do."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise ClusterError("--executor ray needs Ray: pip install 'swarmfab[ray]'") from exc
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # Ray's internals moved: check what can be checked without them
        resolved = None if address in ("auto", "local") else address
    else:
        try:
            resolved = canonicalize_bootstrap_address(address)
        except (ConnectionError, ValueError) as exc:
            raise ClusterError(f"no Ray cluster for --address {address}: {exc}; "
                               f"{RAY_HELP}") from exc
    if resolved is None:  # nothing more to check before ray.init
        return address
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        shown = address if resolved == address else f"{address} ({resolved})"
        raise ClusterError(f"no Ray cluster answers at {shown}: {exc}; {RAY_HELP}") from exc
    return resolved


@friendly
def run(
    target: Annotated[str, typer.Argument(
        help="A workload name (kda), a goal TOML file, or a workload or problem .py file.")],
    budget: Annotated[str | None, typer.Option(help="Wall-time budget, e.g. 60s, 10m.")] = None,
    db: DbOption = DEFAULT_DB,
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of agents and inputs.")] = None,
    max_evaluations: Annotated[int | None, typer.Option(help="Stop after N evaluations.")] = None,
    workers: WorkersOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = "auto",
    workdir: WorkdirOption = Path(".swarmfab"),
    agents: Annotated[str | None, typer.Option(
        help="Comma-separated agent kinds: builtin, llm (default: the goal's, else builtin).")
    ] = None,
    llm_provider: LlmProviderOption = None,
    llm_base_url: LlmBaseUrlOption = None,
    llm_model: LlmModelOption = None,
    llm_api_key_env: LlmApiKeyEnvOption = None,
    llm_budget_usd: LlmBudgetUsdOption = None,
    llm_budget_tokens: LlmBudgetTokensOption = None,
    llm_price_input: LlmPriceInputOption = None,
    llm_price_output: LlmPriceOutputOption = None,
    no_lessons: NoLessonsOption = False,
    fail_if_no_champion: FailIfNoChampionOption = False,
    sizes: SizesOption = "auto",
    allow_weak_sandbox: AllowWeakSandboxOption = False,
    as_json: JsonOption = False,
) -> None:
    """Optimise a workload: agents propose, every candidate is verified and benchmarked.

    A goal file with ``kind = "engine"`` tunes a whole serving engine instead. With
    --json the progress goes to stderr and stdout gets the outcome: run, status, verdict
    counts, champion and its figures."""
    from swarmfab.knowledge import Store
    from swarmfab.serving.goal import is_engine_goal

    llm = {"provider": llm_provider, "base_url": llm_base_url, "model": llm_model,
           "api_key_env": llm_api_key_env, "budget_usd": llm_budget_usd,
           "budget_tokens": llm_budget_tokens, "price_input": llm_price_input,
           "price_output": llm_price_output}
    if target.endswith(".toml") and is_engine_goal(Path(target)):
        from swarmfab.cli.engine import run_engine

        refuse_for_engine({"--workers": workers is not None, "--executor": executor != "local",
                           "--address": address != "auto", "--agents": agents is not None,
                           "--sizes": sizes != "auto", "--allow-weak-sandbox": allow_weak_sandbox,
                           **{_flag(key): value is not None for key, value in llm.items()}})
        run_engine(Path(target), budget=budget, db=db, workdir=workdir, seed=seed,
                   threads=threads, max_evaluations=max_evaluations,
                   fail_if_no_champion=fail_if_no_champion, use_lessons=not no_lessons,
                   as_json=as_json)
        return
    from swarmfab.swarm.launch import load_target, sized_for_host

    kinds = [kind.strip() for kind in agents.split(",") if kind.strip()] if agents else None
    goal = load_target(target, budget=budget, threads=threads, seed=seed,
                       max_evaluations=max_evaluations, workers=workers, agents=kinds, llm=llm)
    if allow_weak_sandbox:
        goal = goal.with_overrides(allow_weak_sandbox=True)
    refuse_llm_without_agents(llm, goal.agents)  # all checked before a problem is sized
    factory = _executor_factory(executor, address)
    goal = sized_for_host(goal, sizes, _progress(as_json))
    _launch(goal, Store(db), workdir, resume=None, executor=factory,
            use_lessons=not no_lessons, fail_if_no_champion=fail_if_no_champion,
            as_json=as_json)


@friendly
def resume(
    run_id: RequiredRunArgument,
    budget: Annotated[str | None, typer.Option(help="Wall-time budget of this session.")] = None,
    db: DbOption = DEFAULT_DB,
    max_evaluations: Annotated[int | None, typer.Option(help="Stop after N evaluations.")] = None,
    workers: WorkersOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = "auto",
    workdir: WorkdirOption = Path(".swarmfab"),
    no_lessons: NoLessonsOption = False,
    fail_if_no_champion: FailIfNoChampionOption = False,
    as_json: JsonOption = False,
) -> None:
    """Continue an interrupted or killed run: nothing already judged is evaluated again
    (--json: the outcome on stdout, as `run --json` prints it)."""
    from swarmfab.goal import Goal
    from swarmfab.knowledge import Store

    store = Store(db)
    record = store.run(run_id)
    if record.status == "running":
        errors.print(f"note: run {record.id} is marked running; if it is still alive elsewhere, "
                     "stop it first (this continues from what it recorded)", highlight=False)
    if record.workload == "engine":
        from swarmfab.cli.engine import resume_engine

        refuse_for_engine({"--workers": workers is not None, "--executor": executor != "local",
                           "--address": address != "auto"})
        resume_engine(store, record.id, record.goal, budget=budget, workdir=workdir,
                      max_evaluations=max_evaluations,
                      fail_if_no_champion=fail_if_no_champion, use_lessons=not no_lessons,
                      as_json=as_json)
        return
    factory = _executor_factory(executor, address)
    goal = Goal.model_validate(record.goal).with_overrides(
        budget=budget, max_evaluations=max_evaluations, workers=workers)
    _launch(goal, store, workdir, resume=record.id, executor=factory,
            use_lessons=not no_lessons, fail_if_no_champion=fail_if_no_champion,
            as_json=as_json)


def _progress(as_json: bool) -> Any:
    """Where a command's progress lines go: stderr when stdout carries the JSON."""
    if not as_json:
        return say
    return lambda line: errors.print(line, highlight=False, markup=False)


def _launch(goal: Any, store: Store, workdir: Path, resume: str | None,
            executor: Any = None, use_lessons: bool = True,
            fail_if_no_champion: bool = False, as_json: bool = False) -> None:
    from swarmfab.report import run_table

    result, swarm = execute_goal(goal, store, workdir, resume, executor, use_lessons,
                                 out=errors if as_json else console)
    if as_json:
        print_json(_outcome(result, swarm, store))
        if result.status == "interrupted":
            raise typer.Exit(130)
        if result.champion is None and fail_if_no_champion:
            raise typer.Exit(1)
        return
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
    console.print(
        f"run {result.run_id} {result.status}: {result.evaluations} evaluations ({counts})"
    )
    if result.status == "interrupted":
        raise typer.Exit(130)
    if result.champion is None:
        _no_champion(result, swarm)
        raise typer.Exit(1 if fail_if_no_champion else 0)
    run_record = store.run(result.run_id)
    if run_record.summary and run_record.summary["shapes"]:
        console.print(run_table(run_record.summary))
    console.print(f"champion {result.champion.id}: {result.champion.knobs}")
    console.print(f"champion source: {result.champion_dir}")


def _outcome(result: Any, swarm: Any, store: Store) -> dict[str, Any]:
    """What a run or resume ends with, for --json: the counts, the champion, the final
    figures (the run's closing table) and the fastest baseline per shape."""
    champion = result.champion
    summary = store.run(result.run_id).summary or {}
    fastest = getattr(swarm, "baseline_incumbents", None) or {}
    return {"run": result.run_id, "status": result.status, "evaluations": result.evaluations,
            "counts": dict(result.counts),
            "champion": None if champion is None else champion.id,
            "champion_knobs": None if champion is None else champion.knobs,
            "champion_source": None if result.champion_dir is None else str(result.champion_dir),
            "figures": summary.get("shapes", []),
            "fastest_baselines": {str(shape): impl.name for shape, impl in fastest.items()}}


def _no_champion(result: Any, swarm: Any) -> None:
    """A run that found nothing faster: the baselines are its answer, shape by shape."""
    fastest = swarm.baseline_incumbents  # per shape, the fastest baseline
    answer = "; ".join(f"{shape}: {impl.name}" for shape, impl in fastest.items())
    console.print(f"no candidate beat the baselines in {result.evaluations} evaluations; "
                  "the fastest baseline per shape is the answer"
                  + (f": {answer}" if answer else "") + " (times above)", highlight=False)
