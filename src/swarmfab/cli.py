"""The ``swarmfab`` command line."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmfab import lessons_cli
from swarmfab._cli_common import (
    DbOption,
    JsonOption,
    console,
    errors,
    friendly,
    parse_shape,
)
from swarmfab.corpus_cli import corpus_app
from swarmfab.errors import GoalError
from swarmfab.knowledge import DEFAULT_DB, Store

app = typer.Typer(
    name="swarmfab", no_args_is_help=True, add_completion=False,
    help="A self-improving factory for verified AI inference kernels.",
)
app.add_typer(corpus_app, name="corpus")
WorkersOption = Annotated[int | None, typer.Option(
    help="Evaluations at once (default: as many benchmarks as fit on the host's cores).")]
ExecutorOption = Annotated[str, typer.Option(
    help="Where evaluations run: local (a pool on this host) or ray (a Ray cluster).")]
AddressOption = Annotated[str, typer.Option(
    help="Ray cluster address with --executor ray: auto, or HOST:PORT.")]


def _executor_factory(executor: str, address: str) -> Any:
    """The run's executor factory; None means the default local pool."""
    if executor == "local":
        return None
    if executor != "ray":
        raise GoalError(f"unknown executor {executor!r}; choose local or ray")
    from swarmfab.swarm.ray_executor import RayExecutor

    return lambda evaluator, workers: RayExecutor(evaluator, address, workers)
app.command("lessons")(lessons_cli.lessons)
NoLessonsOption = Annotated[bool, typer.Option(
    "--no-lessons", help="Ignore what earlier runs in the store learned (for comparison).")]


def _goal(target: str, budget: str | None, threads: int | None, seed: int | None,
          max_evaluations: int | None, workers: int | None = None) -> Any:
    from swarmfab.goal import default_goal, load_goal

    path = Path(target)
    goal = load_goal(path) if path.suffix == ".toml" else default_goal(target)
    return goal.with_overrides(budget=budget, threads=threads, seed=seed,
                               max_evaluations=max_evaluations, workers=workers)


def _evaluator(
    goal: Any, workdir: Path, store: Store, shapes: list[Any] | None = None
) -> Any:
    """An evaluator for ``goal`` whose corpus is the built-in cases plus the stored ones."""
    from swarmfab.evaluation import Evaluator
    from swarmfab.sandbox import Limits
    from swarmfab.workloads import Tolerances, get_workload

    workload = get_workload(goal.workload)
    corpus = [*workload.validation_cases(), *store.cases(goal.workload)]
    defaults = workload.tolerances(__import__("torch").float32)
    tolerances = Tolerances(goal.tolerance.rms_ratio or defaults.rms_ratio,
                            goal.tolerance.max_abs or defaults.max_abs_ratio)
    return Evaluator(workload, shapes or goal.target_shapes(), workdir / "cache",
                     threads=goal.threads, tolerances=tolerances,
                     limits=Limits(wall_s=goal.eval_timeout_s), seed=goal.seed, cases=corpus,
                     device=goal.device)


def _require_device(device: str) -> None:
    """A goal for a CUDA device stops here, with the reason, on a host without one."""
    from swarmfab.backends import cuda_device_available

    if device == "cuda" and not cuda_device_available():
        raise GoalError("the goal asks for device = \"cuda\" but this host has no CUDA "
                        "device (torch.cuda.is_available() is False); run it on a GPU host "
                        "or set device = \"cpu\"")


@app.command()
@friendly
def run(
    target: Annotated[str, typer.Argument(help="A workload name (kda) or a goal TOML file.")],
    budget: Annotated[str | None, typer.Option(help="Wall-time budget, e.g. 60s, 10m.")] = None,
    db: DbOption = str(DEFAULT_DB),
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of agents and inputs.")] = None,
    max_evaluations: Annotated[int | None, typer.Option(help="Stop after N evaluations.")] = None,
    workers: WorkersOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = "auto",
    workdir: Annotated[Path, typer.Option(help="Build cache and champions.")] = Path(".swarmfab"),
    agents: Annotated[str | None, typer.Option(
        help="Comma-separated agent kinds: builtin, llm (default: the goal's, else builtin).")
    ] = None,
    llm_provider: Annotated[str | None, typer.Option(help="openai (any compatible server) "
                                                     "or anthropic.")] = None,
    llm_base_url: Annotated[str | None, typer.Option(
        help="Endpoint, e.g. http://127.0.0.1:8000/v1 for vLLM (default: the provider's).")
    ] = None,
    llm_model: Annotated[str | None, typer.Option(help="Model name the endpoint serves.")] = None,
    llm_api_key_env: Annotated[str | None, typer.Option(
        help="Environment variable holding the API key (default OPENAI_API_KEY or "
             "ANTHROPIC_API_KEY).")] = None,
    llm_budget_usd: Annotated[float | None, typer.Option(
        help="Spend after which the LLM agents stop (the run goes on).")] = None,
    no_lessons: NoLessonsOption = False,
) -> None:
    """Optimise a workload: agents propose, every candidate is verified and benchmarked."""
    goal = _goal(target, budget, threads, seed, max_evaluations, workers)
    llm = {"provider": llm_provider, "base_url": llm_base_url, "model": llm_model,
           "api_key_env": llm_api_key_env, "budget_usd": llm_budget_usd}
    kinds = [kind.strip() for kind in agents.split(",") if kind.strip()] if agents else None
    goal = goal.with_overrides(agents=kinds, llm=llm)
    _launch(goal, Store(db), workdir, resume=None,
            executor=_executor_factory(executor, address), use_lessons=not no_lessons)


@app.command()
@friendly
def resume(
    run_id: Annotated[str, typer.Argument(
        help="The run to continue: an id (see `swarmfab runs`) or latest.")],
    budget: Annotated[str | None, typer.Option(help="Wall-time budget of this session.")] = None,
    db: DbOption = str(DEFAULT_DB),
    max_evaluations: Annotated[int | None, typer.Option(help="Stop after N evaluations.")] = None,
    workers: WorkersOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = "auto",
    workdir: Annotated[Path, typer.Option(help="Build cache and champions.")] = Path(".swarmfab"),
    no_lessons: NoLessonsOption = False,
) -> None:
    """Continue an interrupted or killed run: nothing already judged is evaluated again."""
    from swarmfab.goal import Goal

    store = Store(db)
    record = store.run(run_id)
    if record.status == "running":
        errors.print(f"note: run {record.id} is marked running; if it is still alive elsewhere, "
                     "stop it first (this continues from what it recorded)", highlight=False)
    goal = Goal.model_validate(record.goal).with_overrides(
        budget=budget, max_evaluations=max_evaluations, workers=workers)
    _launch(goal, store, workdir, resume=record.id,
            executor=_executor_factory(executor, address), use_lessons=not no_lessons)


def _lesson_context(goal: Any, space: Any) -> Any:
    """This goal's context for lessons and recall: workload, device class, shape classes."""
    import platform

    from swarmfab.backends import get_backend
    from swarmfab.knowledge import LessonContext

    host = {"machine": platform.machine(), "threads": goal.threads,
            **get_backend(space.backend).describe()}
    labels = [shape.label for shape in goal.target_shapes()]
    return LessonContext.of(goal.workload, host, labels)


def _launch(goal: Any, store: Store, workdir: Path, resume: str | None,
            executor: Any = None, use_lessons: bool = True) -> None:
    from swarmfab.agents.builtin import RecallAgent, RestartAgent, bandit_agents
    from swarmfab.kernels import design_space
    from swarmfab.report import run_table
    from swarmfab.report.progress import LiveProgress
    from swarmfab.swarm import Run

    _require_device(goal.device)
    space = design_space(goal.workload, goal.device)
    agents: list[Any] = []
    reviewer = None
    if "llm" in goal.agents:  # first: a bad key or model fails before any work is done
        from swarmfab.agents.llm import llm_agents

        agents, reviewer, _ = llm_agents(goal.llm)
    builtin = "builtin" in goal.agents
    context = _lesson_context(goal, space)
    lessons = tuple(store.lessons_for(context)) if use_lessons else ()
    recalled = store.recall(context) if use_lessons and builtin else []
    if lessons or recalled:
        helpful = sum(lesson.outcome == "helps" for lesson in lessons)
        console.print(f"{len(lessons)} lesson(s) from earlier runs ({helpful} helpful moves), "
                      f"{len(recalled)} champion setting(s) recalled; --no-lessons to ignore "
                      "them", highlight=False)
    if builtin:
        agents += [RecallAgent(recalled)] if recalled else []  # first: start where others ended
        agents += bandit_agents(space.knobs)  # they read the lessons in their context
    evaluator = _evaluator(goal, workdir, store)

    def execute(log: Callable[[str], None], observer: Callable[[Any], None] | None) -> Any:
        return Run(goal, store, evaluator, space, agents, workdir, log=log,
                   fallback=RestartAgent() if builtin else None, observer=observer,
                   reviewer=reviewer, executor=executor, lessons=lessons).execute(resume)

    if console.is_terminal:  # a live panel; pipes and CI get plain lines
        with LiveProgress(console) as live:
            result = execute(live.log, live.update)
    else:
        result = execute(lambda line: console.print(line, highlight=False), None)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
    console.print(
        f"run {result.run_id} {result.status}: {result.evaluations} evaluations ({counts})"
    )
    if result.status == "interrupted":
        raise typer.Exit(130)
    if result.champion is None:
        console.print("no candidate beat the baselines: no champion")
        raise typer.Exit(1)
    run_record = store.run(result.run_id)
    if run_record.summary and run_record.summary["shapes"]:
        console.print(run_table(run_record.summary))
    console.print(f"champion {result.champion.id}: {result.champion.knobs}")
    console.print(f"champion source: {result.champion_dir}")


@app.command()
@friendly
def verify(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    file: Annotated[Path, typer.Argument(help="Candidate: a .c, .cu or .py file.")],
    as_json: JsonOption = False,
    threads: Annotated[int | None, typer.Option(help="Threads for the candidate.")] = None,
    fuzz: Annotated[int, typer.Option(help="Random cases added to the corpus cases.")] = 8,
    backend: Annotated[str | None, typer.Option(
        help="c, python, numba, torch-compile, cuda or triton (default: from the suffix).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the fuzzing draws.")] = 0,
    db: DbOption = str(DEFAULT_DB),
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
) -> None:
    """Verify a candidate file: corpus, fuzzing, anti-cheat probes. Exit 0 if accepted.

    A fuzzing case that breaks the candidate is added to the stored corpus.
    """
    import random

    from swarmfab.backends import cuda_device_available
    from swarmfab.goal import default_goal
    from swarmfab.records import Status
    from swarmfab.report import verdict_table
    from swarmfab.verify import draw_cases

    candidate = _candidate_from_file(workload, file, backend)
    # GPU candidates run on the device where there is one (elsewhere they still build,
    # so compile errors are reported, and loading says why it cannot run)
    on_gpu = candidate.backend in ("cuda", "triton") and cuda_device_available()
    goal = default_goal(workload).with_overrides(threads=threads,
                                                 device="cuda" if on_gpu else None)
    store = Store(db)
    evaluator = _evaluator(goal, workdir, store)
    drawn = draw_cases(evaluator.workload, random.Random(seed), fuzz)
    verdict = evaluator.verify(candidate, [*evaluator.cases, *drawn])
    failed = verdict.failed_check
    found = evaluator.case_of(failed, drawn) if failed else None
    if found is not None and store.add_case(
        workload, dataclasses.replace(found, origin=f"fuzz: broke {file.name}")
    ):
        errors.print(f"counterexample {found.name} ({found.shape.label}) added to the corpus")
    if as_json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        console.print(verdict_table(verdict))
        for line in verdict.diagnostics:
            console.print(line, highlight=False, markup=False)
    raise typer.Exit(0 if verdict.status is Status.ACCEPTED else 1)


def _candidate_from_file(workload: str, file: Path, backend: str | None = None) -> Any:
    from swarmfab.backends import backend_for_file, backend_names
    from swarmfab.errors import CandidateError
    from swarmfab.records import Candidate

    if backend is not None and backend not in backend_names():
        raise GoalError(f"--backend {backend!r}: allowed values are {', '.join(backend_names())}")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CandidateError(f"cannot read candidate {file}: {exc}") from exc
    kind = backend or backend_for_file(file)
    return Candidate(workload, kind, {file.name: text}, file.name,
                     flags=("-O3", "-march=native") if kind == "c" else ())


@app.command()
@friendly
def bench(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    candidate: Annotated[str | None, typer.Option(
        help="A candidate file, 'champion' (of --run, default latest) or 'default' "
             "(the design space's starting point).")] = None,
    run_id: Annotated[str | None, typer.Option(
        "--run", help="Run whose champion to use: an id or latest (default).")] = None,
    shape: Annotated[list[str] | None, typer.Option(
        help="B,T,H,K,V[,HV][+h0] (+h0: with an initial state); repeatable.")] = None,
    db: DbOption = str(DEFAULT_DB),
    as_json: JsonOption = False,
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    cold: Annotated[bool, typer.Option(help="Flush the caches before every sample.")] = False,
    baseline: Annotated[list[str] | None, typer.Option(
        help="Baselines to time (repeatable; default: the standard ones; torch-compile "
             "is opt-in: it compiles for a while in every job).")] = None,
    device: Annotated[str, typer.Option(
        help="cpu, or cuda: time on the CUDA device (CUDA events, L2 flushed; the "
             "default baselines are then fla's kernels where fla is installed).")] = "cpu",
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
) -> None:
    """Time baselines (and a candidate) side by side: medians, CIs, speedups, roofline."""
    from swarmfab.evaluation import Implementation
    from swarmfab.goal import default_goal
    from swarmfab.measure import CONFIRMATION
    from swarmfab.measure.timer import last_level_cache_bytes
    from swarmfab.report import bench_table
    from swarmfab.swarm.hosts import host_peaks

    goal = default_goal(workload).with_overrides(threads=threads, device=device)
    _require_device(goal.device)
    shapes = [parse_shape(s) for s in shape] if shape else None
    store = Store(db)
    evaluator = _evaluator(goal, workdir, store, shapes)
    evaluator.peaks = host_peaks(store, goal.threads, evaluator.limits, device=goal.device)
    contenders = []
    if candidate is not None:
        chosen = _bench_candidate(store, workload, candidate, run_id, goal.threads, goal.device)
        verdict = evaluator.verify(chosen)
        if verdict.status.value != "accepted":
            errors.print(f"[red]the candidate is not verified:[/] {verdict.reason}")
            raise typer.Exit(1)
        contenders.append(Implementation("candidate", artifact=evaluator.build(chosen)))
    known = evaluator.workload.baselines()
    names = baseline or evaluator.workload.default_baselines(goal.device)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise GoalError(f"--baseline {', '.join(unknown)}: {workload} has {', '.join(known)}")
    contenders += [Implementation(n, baseline=n) for n in names]
    flush = 2 * last_level_cache_bytes() if cold else 0
    tables = evaluator.side_by_side(contenders, dataclasses.replace(CONFIRMATION,
                                                                   flush_bytes=flush))
    if as_json:
        print(json.dumps([_side_json(t) for t in tables], indent=2))
    else:
        title = (f"{workload}: side by side, {goal.threads} thread(s), "
                 f"{'cold' if cold else 'warm'} cache")
        if goal.device == "cuda":
            title = f"{workload}: side by side on the CUDA device (L2 flushed before every sample)"
        console.print(bench_table(tables, title))


def _bench_candidate(store: Store, workload: str, which: str, run_id: str | None,
                     threads: int, device: str = "cpu") -> Any:
    from swarmfab.errors import StoreError
    from swarmfab.kernels import design_space

    if which == "default":
        space = design_space(workload, device)
        return space.instantiate(space.default(), threads=threads)
    if which == "champion":
        record = store.run(run_id)
        if record.champion_id is None:
            raise StoreError(f"run {record.id} has no champion")
        return store.candidate(record.champion_id)
    return _candidate_from_file(workload, Path(which))


def _side_json(table: Any) -> dict[str, Any]:
    def est(e: Any) -> dict[str, float]:
        return {"median": e.median, "low": e.low, "high": e.high}

    return {"shape": table.shape, "reference": table.reference, "samples": table.samples,
            "cache": table.cache, "roofline_bound_s": table.bound_s,
            "seconds": {n: est(e) for n, e in table.seconds.items()},
            "ratio_to_reference": {n: est(e) for n, e in table.ratio_to_reference.items()}}


@app.command()
@friendly
def export(
    run_id: Annotated[str | None, typer.Argument(help="Run id or latest (default: latest).")
                      ] = None,
    out: Annotated[Path, typer.Option(help="Directory to write.")] = Path("champion"),
    name: Annotated[str | None, typer.Option(
        help="Python package name (default: WORKLOAD_champion).")] = None,
    db: DbOption = str(DEFAULT_DB),
) -> None:
    """Write a run's champion as an installable package with provenance and evidence."""
    from swarmfab.report.export import export_champion

    where = export_champion(Store(db), run_id, out, name)
    console.print(f"champion exported to {where}: `pip install {where}`, then import it; "
                  "evidence in VERIFICATION.md and provenance.json")


@app.command()
@friendly
def report(
    run_id: Annotated[str | None, typer.Argument(help="Run id or latest (default: latest).")
                      ] = None,
    db: DbOption = str(DEFAULT_DB),
    as_json: JsonOption = False,
    out: Annotated[Path | None, typer.Option(
        help="Write one self-contained HTML file (charts, lineage, evidence) here.")] = None,
) -> None:
    """Summarise a run from the store: verdicts by status, champion lineage, final figures."""
    from swarmfab.report import run_table

    store = Store(db)
    if out is not None:
        from swarmfab.report.html import write_report

        written = write_report(store, run_id, out)
        console.print(f"report written to {written}", highlight=False)
        return
    record = store.run(run_id)
    verdicts: list[dict[str, Any]] = [
        {"candidate": row.candidate_id, "agent": row.agent, "status": row.status,
         "reason": row.reason, "champion": row.became_champion}
        for row, _ in store.verdicts(record.id)
    ]
    counts = store.status_counts(record.id)
    if as_json:
        data = {
            "run": record.id, "workload": record.workload, "status": record.status,
            "started_at": str(record.started_at), "finished_at": str(record.finished_at),
            "counts": counts, "champion": record.champion_id, "summary": record.summary,
            "verdicts": verdicts,
        }
        print(json.dumps(data, indent=2, default=str))
        return
    console.print(f"run {record.id} ({record.workload}): {record.status}; verdicts {counts}")
    for entry in verdicts:
        crown = " (champion)" if entry["champion"] else ""
        console.print(f"  {entry['candidate'][:10]} {entry['agent']:<20} {entry['status']:<12} "
                      f"{entry['reason'][:90]}{crown}", highlight=False)
    if record.summary and record.summary.get("shapes"):
        console.print(run_table(record.summary))


@app.command()
@friendly
def show(
    run_id: Annotated[str | None, typer.Argument(help="Run id or latest (default: latest).")
                      ] = None,
    db: DbOption = str(DEFAULT_DB),
    as_json: JsonOption = False,
) -> None:
    """A run at a glance: goal, champion and its figures, verdicts by status, agent, reason."""
    from collections import Counter

    from swarmfab.agents.llm.spend import summarise_events

    store = Store(db)
    record = store.run(run_id)
    rows = [row for row, _ in store.verdicts(record.id)]
    rejected = [row for row in rows if row.status != "accepted"]
    data = {
        "run": record.id, "workload": record.workload, "status": record.status,
        "goal": record.goal, "host": record.host, "champion": record.champion_id,
        "champion_figures": (record.summary or {}).get("shapes", []),
        "archive": (record.summary or {}).get("archive", []),
        "search": (record.summary or {}).get("search"),  # seconds, evaluations, workers
        "overhead": (record.summary or {}).get("overhead"),
        "verdicts": len(rows),
        "by_status": dict(Counter(row.status for row in rows)),
        "by_agent": dict(Counter(row.agent for row in rows)),
        "by_reject_reason": dict(Counter(row.reason.split(":")[0] for row in rejected)),
        "interventions": [detail for _, detail in store.events(record.id, "intervention")],
        "events": [{"kind": kind, "detail": detail} for kind, detail in store.events(record.id)],
        "llm": summarise_events(store.events(record.id)),
    }
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    for key in ("run", "workload", "status", "champion", "verdicts", "by_status", "by_agent",
                "by_reject_reason", "interventions", "llm"):
        if data[key] is not None:
            console.print(f"{key:>17}: {data[key]}", highlight=False)


@app.command()
@friendly
def runs(db: DbOption = str(DEFAULT_DB)) -> None:
    """List the runs in the store."""
    for record in Store(db).runs():
        console.print(f"{record.id}  {record.workload:<8} {record.status:<12} "
                      f"champion={record.champion_id}", highlight=False)



@app.command()
@friendly
def dashboard(
    db: DbOption = str(DEFAULT_DB),
    host: Annotated[str, typer.Option(help="Address to bind; keep 127.0.0.1 unless you "
                                           "mean to share the store.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """A local web dashboard of the runs in the store, updated live while they run."""
    from swarmfab.report.dashboard import serve

    console.print(f"dashboard on http://{host}:{port}/ (Ctrl-C stops it)", highlight=False)
    serve(Store(db), host, port)


@app.command()
@friendly
def serve(
    model_dir: Annotated[Path, typer.Argument(
        help="A Kimi Linear checkpoint directory (config.json, *.safetensors, "
             "tokenizer.json).")],
    host: Annotated[str, typer.Option(help="Address to bind; 127.0.0.1 unless you mean to "
                                           "serve other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="SWARMFAB_API_KEY",
        help="Require 'Authorization: Bearer KEY' on every endpoint but /health.")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="Running sequences at most.")] = 32,
    max_num_batched_tokens: Annotated[int, typer.Option(
        help="New tokens per step (the chunked-prefill budget).")] = 256,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = 16,
    kv_cache_mb: Annotated[int, typer.Option(help="Memory for the attention KV pool.")] = 64,
    max_model_len: Annotated[int, typer.Option(help="Prompt + output per request.")] = 4096,
    kda_kernel: Annotated[Path | None, typer.Option(
        help="A KDA candidate file (C or Python, e.g. a champion's source) for both KDA "
             "slots instead of the PyTorch references.")] = None,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (completions, chat, SSE)."""
    from swarmfab.engine.engine import EngineConfig
    from swarmfab.engine.server import serve as serve_http

    config = EngineConfig(max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens,
                          block_size=block_size, kv_cache_bytes=kv_cache_mb << 20,
                          max_model_len=max_model_len)
    slots = _kda_slots(kda_kernel) if kda_kernel else None
    console.print(f"serving {model_dir} on http://{host}:{port}/v1 (Ctrl-C stops it)",
                  highlight=False)
    serve_http(model_dir, host=host, port=port, api_key=api_key, config=config, slots=slots)


def _kda_slots(file: Path) -> Any:
    from swarmfab.backends import get_backend
    from swarmfab.engine.slots import KernelSlots
    from swarmfab.workloads import get_workload

    candidate = _candidate_from_file("kda", file)
    backend = get_backend(candidate.backend)
    artifact = backend.build(candidate, Path(".swarmfab") / "engine-kernels")
    forward = backend.load(artifact, get_workload("kda"), fill_outputs=False)
    return KernelSlots().with_kda(forward, label=f"{candidate.backend}:{file.name}")


@app.command()
@friendly
def loadgen(
    base_url: Annotated[str, typer.Option(help="The server's address.")] =
        "http://127.0.0.1:8000",
    num_prompts: Annotated[int, typer.Option(help="Measured requests.")] = 32,
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.")] = 32,
    output_len: Annotated[int, typer.Option(help="Output tokens per request.")] = 32,
    request_rate: Annotated[float, typer.Option(
        help="Requests per second; inf sends all at once.")] = float("inf"),
    burstiness: Annotated[float, typer.Option(
        help="Gamma shape of the arrival gaps (1 = Poisson).")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(
        help="Requests in flight at most (a closed loop).")] = None,
    num_warmups: Annotated[int, typer.Option(help="Unmeasured requests first.")] = 1,
    seed: Annotated[int, typer.Option(help="Prompts and arrivals.")] = 0,
    goodput: Annotated[list[str] | None, typer.Option(
        help="SLO as metric:ms (ttft, tpot, e2el); repeatable.")] = None,
    percentile: Annotated[list[float] | None, typer.Option(
        help="Percentiles to report (default 99); repeatable.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="SWARMFAB_API_KEY")] = None,
    result_file: Annotated[Path | None, typer.Option(help="Write the JSON here.")] = None,
) -> None:
    """Load a running server as vLLM's `bench serve` does and print its metrics."""
    import asyncio

    from swarmfab.engine.loadgen import LoadSpec, run_load

    slos: dict[str, float] = {}
    for item in goodput or []:
        name, _, value = item.partition(":")
        if name not in ("ttft", "tpot", "e2el") or not value:
            raise GoalError(f"--goodput {item!r}: expected ttft:MS, tpot:MS or e2el:MS")
        slos[name] = float(value)
    if burstiness <= 0 or request_rate <= 0:
        raise GoalError("--burstiness and --request-rate must be positive")
    spec = LoadSpec(base_url=base_url, num_prompts=num_prompts, input_len=input_len,
                    output_len=output_len, request_rate=request_rate, burstiness=burstiness,
                    max_concurrency=max_concurrency, num_warmups=num_warmups, seed=seed,
                    api_key=api_key, percentiles=tuple(percentile or [99.0]), goodput=slos)
    try:
        result = asyncio.run(run_load(spec))
    except OSError as exc:
        raise GoalError(f"cannot reach {base_url}: {exc}") from exc
    if result_file:
        result_file.write_text(json.dumps(result, indent=2))
    summary = {k: v for k, v in result.items() if not isinstance(v, list)}
    for key, value in summary.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        console.print(f"{key:<28} {shown}", highlight=False)


@app.command("bench-policy")
@friendly
def bench_policy(
    workload: Annotated[str, typer.Argument(help="Workload name, e.g. kda.")],
    shape: Annotated[str, typer.Option(
        help="B,T,H,K,V[,HV][+h0]: the one shape every candidate is timed on.")]
        = "1,512,4,128,128",
    seeds: Annotated[int, typer.Option(min=1, help="Searches per policy.")] = 3,
    max_evaluations: Annotated[int, typer.Option(
        min=1, help="Evaluations per search (the same for every policy).")] = 30,
    target: Annotated[float, typer.Option(
        min=0.01, max=1.0, help="Share of the best-known speed a champion must reach.")] = 0.9,
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    db: DbOption = str(DEFAULT_DB),
    workdir: Annotated[Path, typer.Option(help="Build cache.")] = Path(".swarmfab"),
) -> None:
    """The built-in agents against uniform random search over the same design space."""
    from swarmfab.goal import default_goal
    from swarmfab.kernels import design_space
    from swarmfab.report import policy_table
    from swarmfab.swarm.policy_bench import SpeedOracle, compare_policies, summary

    goal = default_goal(workload).with_overrides(threads=threads)
    space = design_space(workload)
    evaluator = _evaluator(goal, workdir, Store(db), [parse_shape(shape)])
    reference = space.instantiate(space.default(), threads=goal.threads)
    oracle = SpeedOracle(evaluator, evaluator.cases, reference,
                         log=lambda line: console.print(line, highlight=False))
    results = compare_policies(space, goal, oracle, range(seeds), max_evaluations)
    best, rows = summary(results, target, max_evaluations)
    console.print(policy_table(rows, best, target, max_evaluations, len(oracle.seconds),
                               f"{workload} {shape}, {goal.threads} thread(s)"))
