"""``swarmfab suite DIR``: every problem file of a directory, one run each, one scorecard.

Each problem gets its own budget, counted from the moment its turn starts (loading and
sizing included), and its own run in the store. A problem that fails to load, does not
fit this host's memory, or whose run fails for any reason is a row with its reason, and
the suite goes on; Ctrl-C ends the suite with the scorecard of the problems already
done. Each problem's score is kept with its run as soon as it is done, so ``--resume``
on the same store skips the problems finished before (a suite stopped by anything,
even the kernel's out-of-memory killer, loses only the problem it was on).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmfab.cli._common import (
    DEFAULT_DB,
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
    console,
    errors,
    execute_goal,
    friendly,
)
from swarmfab.cli.run import SizesOption, WorkdirOption
from swarmfab.errors import GoalError, SwarmfabError

__all__ = ["suite"]

DEFAULT_BUDGET = "2m"


@friendly
def suite(
    directory: Annotated[Path, typer.Argument(help="A directory of problem .py files.")],
    budget_per_problem: Annotated[str | None, typer.Option(
        help="Wall-time budget of each problem's run, e.g. 1m (default: the --goal "
             "file's budget, else 2m).")] = None,
    db: DbOption = DEFAULT_DB,
    workdir: WorkdirOption = Path(".swarmfab"),
    threads: Annotated[int | None, typer.Option(help="Threads per benchmark.")] = None,
    max_evaluations: Annotated[int | None, typer.Option(
        help="Stop each run after N evaluations.")] = None,
    agents: Annotated[str | None, typer.Option(
        help="Comma-separated agent kinds: builtin, llm (default builtin).")] = None,
    llm_provider: LlmProviderOption = None,
    llm_base_url: LlmBaseUrlOption = None,
    llm_model: LlmModelOption = None,
    llm_api_key_env: LlmApiKeyEnvOption = None,
    llm_budget_usd: LlmBudgetUsdOption = None,
    llm_budget_tokens: LlmBudgetTokensOption = None,
    llm_price_input: LlmPriceInputOption = None,
    llm_price_output: LlmPriceOutputOption = None,
    sizes: SizesOption = "auto",
    goal_file: Annotated[Path | None, typer.Option(
        "--goal", help="A goal TOML whose settings (agents, [llm], tolerance, threads...) "
                       "every problem's run takes; its workload key may be left out.")] = None,
    only: Annotated[str | None, typer.Option(
        help="Only problems whose file name contains this text.")] = None,
    as_json: JsonOption = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Keep the scores of problems a suite already finished in this "
                         "store (their latest finished run); run only the others.")] = False,
) -> None:
    """Run every problem file in DIR and print the scorecard: correctness, speedup over
    eager and over torch.compile, fast_p."""
    from swarmfab.goal import default_goal, load_goal
    from swarmfab.knowledge import Store
    from swarmfab.report.scorecard import (
        ProblemScore,
        Scorecard,
        record_score,
        recorded_scores,
        scorecard_table,
        summary_line,
    )

    if not directory.is_dir():
        raise GoalError(f"{directory} is not a directory of problem files")
    files = sorted(p for p in directory.glob("*.py") if not p.name.startswith("_")
                   and (only is None or only in p.name))
    if not files:
        raise GoalError(f"no problem .py files in {directory}")
    store = Store(db)
    kinds = [kind.strip() for kind in agents.split(",") if kind.strip()] if agents else None
    llm = {"provider": llm_provider, "base_url": llm_base_url, "model": llm_model,
           "api_key_env": llm_api_key_env, "budget_usd": llm_budget_usd,
           "budget_tokens": llm_budget_tokens, "price_input": llm_price_input,
           "price_output": llm_price_output}  # each run's own budget
    out = errors if as_json else console  # with --json, stdout carries the JSON alone
    done = recorded_scores(store, files) if resume else {}
    scores = []
    try:
        for number, path in enumerate(files, 1):
            out.rule(f"problem {number}/{len(files)}: {path.name}")
            if path in done:
                out.print(f"{path.name}: done in run {done[path].run_id} (--resume keeps "
                          "its score)", highlight=False)
                scores.append(done[path])
                continue
            started = time.monotonic()
            try:
                budget = budget_per_problem or (None if goal_file else DEFAULT_BUDGET)
                changes = {"budget": budget, "threads": threads,
                           "agents": kinds, "llm": llm, "max_evaluations": max_evaluations}
                goal = (default_goal(str(path)).with_overrides(**changes) if goal_file is None
                        else load_goal(goal_file, workload=str(path), **changes))
                score = _score(goal, path, store, workdir, sizes, started, out)
                record_score(store, score)  # kept at once: a later problem may end it all
                scores.append(score)
            except Exception as exc:  # any problem's failure is its row, whatever it is
                reason = str(exc) if isinstance(exc, SwarmfabError | GoalError) \
                    else f"{type(exc).__name__}: {exc}"
                errors.print(f"{path.name}: {reason}", highlight=False)
                scores.append(ProblemScore(path.stem, detail=reason))
    except KeyboardInterrupt:
        errors.print(f"interrupted: the scorecard of the {len(scores)} problem(s) done")
    card = Scorecard(scores)
    if as_json:
        typer.echo(json.dumps(_finite(card.to_dict()), indent=2))
        return
    console.print(scorecard_table(card))
    console.print(summary_line(card), highlight=False)


def _score(goal: Any, path: Path, store: Any, workdir: Path, sizes: str,
           started: float, out: Any) -> Any:
    from swarmfab.report.scorecard import score_run
    from swarmfab.swarm.launch import sized_for_host

    goal = sized_for_host(goal, sizes, lambda line: out.print(line, highlight=False))
    result, swarm = execute_goal(goal, store, workdir, None, started=started, out=out)
    summary = store.run(result.run_id).summary
    calibration = swarm.calibration.seconds if swarm.calibration is not None else None
    label = " ".join(f"{k}={v}" for k, v in goal.target_shapes()[0].sizes)
    return score_run(path.stem, label, result, summary, calibration)


def _finite(value: Any) -> Any:
    """NaN (a CI that was not measured) as null: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
