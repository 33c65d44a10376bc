"""Three ways to configure an engine, side by side (``bench_engine_factory.py --engine
vllm``): the engine's defaults, the grid vLLM's ``benchmarks/auto_tune`` documents, and
the swarm. Each tuner gets the same wall-clock budget on the same model, traffic and
objective; then the three recipes serve in alternating load rounds.

- defaults: the adapter's default recipe (the engine's own defaults);
- auto-tune: vLLM's procedure (its script is not in the wheel): every pair of
  ``max-num-seqs`` x ``max-num-batched-tokens`` from the lists its README gives, one server
  each, the goal's metric measured once per pair under the objective (goodput counts only
  requests within it), the best pair kept; pairs left when the budget ends are skipped;
- swarm: ``swarmfab run GOAL --budget B`` (its launches counted from the servers' logs).

Printed: each tuner's recipe and server launches, the medians over rounds of the goal's
metric, p99 TTFT and TPOT, and the paired ratios swarm / auto-tune and each / defaults
with 95% bootstrap intervals. Figures are written to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from swarmfab.knowledge import Store
from swarmfab.measure.stats import paired_ratio
from swarmfab.serving.engines import SpaceContext, get_engine, recipe_json
from swarmfab.serving.evaluate import EngineProcess, EngineStartError, load_once, warm_up
from swarmfab.serving.goal import load_engine_goal

# vLLM's benchmarks/auto_tune README: NUM_SEQS_LIST and NUM_BATCHED_TOKENS_LIST
AUTO_TUNE_SEQS = (128, 256)
AUTO_TUNE_TOKENS = (512, 1024, 2048, 4096)
# and a wider grid where the host is small: the README's lists are sized for GPUs
SMALL_HOST_SEQS = (8, 16, 32, 64, 128, 256)


def auto_tune(goal: Any, model_dir: Path, work: Path, budget_s: float, seqs: tuple[int, ...],
              log: Any = print) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """The grid within ``budget_s``: (best setting, launches, every pair's figure)."""
    engine = get_engine(goal.engine)
    default = engine.space(SpaceContext(goal, model_dir, {})).default()
    end = time.monotonic() + budget_s
    tried: list[dict[str, Any]] = []
    best, best_metric, launches = dict(default), -1.0, 0
    for count in seqs:
        for tokens in AUTO_TUNE_TOKENS:
            if time.monotonic() >= end:
                log(f"auto-tune: budget spent; {count} x {tokens} and later skipped")
                return best, launches, tried
            setting = {**default, "max_num_seqs": count, "max_num_batched_tokens": tokens}
            recipe = work / f"grid-{count}-{tokens}.json"
            recipe.write_text(recipe_json(goal.engine, setting))
            launches += 1
            try:
                with EngineProcess(model_dir, recipe, recipe.with_suffix(".log"),
                                   engine=engine, goal=goal) as server:
                    server.start(min(goal.startup_timeout_s, max(1.0, end - time.monotonic())))
                    warm_up(server.url, goal)
                    metric = load_once(server.url, goal, goal.seed).metric
            except EngineStartError as exc:
                log(f"auto-tune: {count} x {tokens} did not start: {exc}")
                continue
            tried.append({"max_num_seqs": count, "max_num_batched_tokens": tokens,
                          "metric": metric})
            log(f"auto-tune: max-num-seqs {count} x max-num-batched-tokens {tokens}: "
                f"{goal.metric} {metric:.3g}")
            if metric > best_metric:
                best, best_metric = setting, metric
    return best, launches, tried


def swarm(goal_file: Path, budget: str, work: Path, evaluations: int | None
          ) -> tuple[dict[str, Any], int, str]:
    """The factory's run: (champion setting, server launches, run id)."""
    db = work / "swarm.db"
    limit = ["--max-evaluations", str(evaluations)] if evaluations else []
    subprocess.run([sys.executable, "-m", "swarmfab", "run", str(goal_file), "--budget",
                    budget, "--db", str(db), "--workdir", str(work / "swarm"), *limit],
                   check=True)
    store = Store(db)
    run = store.runs()[-1]
    champion = store.candidate(run.champion_id or "")
    launches = len(list((work / "swarm" / "engine-runs" / run.id).glob("*/*.log")))
    return dict(champion.knobs), launches, run.id


def side_by_side(goal: Any, model_dir: Path, work: Path, recipes: dict[str, dict[str, Any]],
                 rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each recipe served at once; load rounds alternate among them, the order rotating."""
    engine = get_engine(goal.engine)
    servers = {}
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in recipes}
    try:
        for name, setting in recipes.items():
            recipe = work / f"final-{name}.json"
            recipe.write_text(recipe_json(goal.engine, setting))
            servers[name] = EngineProcess(model_dir, recipe, recipe.with_suffix(".log"),
                                          engine=engine, goal=goal).start(600)
            warm_up(servers[name].url, goal)
        names = list(recipes)
        for index in range(rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            for name in order:
                row = load_once(servers[name].url, goal, goal.seed + 100 + index)
                figures[name].append({"metric": row.metric, "p99_ttft_ms": row.p99_ttft_ms,
                                      "p99_tpot_ms": row.p99_tpot_ms,
                                      "output_throughput": row.output_throughput})
            print(f"round {index + 1}/{rounds}: " + ", ".join(
                f"{n} {figures[n][-1]['metric']:.3g}" for n in names), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goal", type=Path, required=True)
    parser.add_argument("--budget", default="15m", help="each tuner's wall-clock budget")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--grid", choices=("readme", "small-host"), default="small-host",
                        help="auto-tune's max-num-seqs list: its README's, or one reaching "
                             "down to the batches a few cores serve")
    parser.add_argument("--swarm-evaluations", type=int, default=None,
                        help="stop the swarm after this many evaluations (its budget "
                             "still bounds it)")
    parser.add_argument("--out", type=Path, default=Path("out/bench-engine-tuners.json"))
    args = parser.parse_args(argv)
    goal = load_engine_goal(args.goal, budget=args.budget)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        model_dir = goal.model_dir(Path("out/checkpoints"))
        default = get_engine(goal.engine).space(SpaceContext(goal, model_dir, {})).default()
        started = time.monotonic()  # the swarm first: it names the model's checkpoint
        swarm_best, swarm_launches, run_id = swarm(args.goal, args.budget, work,
                                                   args.swarm_evaluations)
        swarm_s = time.monotonic() - started
        started = time.monotonic()
        seqs = AUTO_TUNE_SEQS if args.grid == "readme" else SMALL_HOST_SEQS
        grid_best, grid_launches, grid = auto_tune(goal, model_dir, work, goal.budget_s, seqs)
        grid_s = time.monotonic() - started
        recipes = {"defaults": default, "auto-tune": grid_best, "swarm": swarm_best}
        figures = side_by_side(goal, model_dir, work, recipes, args.rounds)
    report(goal, recipes, figures, {"auto-tune": grid_launches, "swarm": swarm_launches,
                                    "defaults": 0},
           {"auto-tune": grid_s, "swarm": swarm_s}, run_id, grid, args.out)


def report(goal: Any, recipes: dict[str, dict[str, Any]],
           figures: dict[str, list[dict[str, float]]], launches: dict[str, int],
           seconds: dict[str, float], run_id: str, grid: list[dict[str, Any]],
           out: Path) -> None:
    print(f"\n{goal.engine}: traffic {goal.traffic.label()}, objective "
          f"{goal.objective.slos()} ms, metric {goal.metric}, {len(figures['swarm'])} rounds")
    print("| tuner | launches | time | " + goal.metric + " | p99 TTFT ms | p99 TPOT ms |")
    print("|---|---|---|---|---|---|")
    for name, rows in figures.items():
        print(f"| {name} | {launches[name]} | {seconds.get(name, 0):.0f} s | "
              + " | ".join(f"{statistics.median(r[k] for r in rows):.3g}"
                           for k in ("metric", "p99_ttft_ms", "p99_tpot_ms")) + " |")
    ratios = {}
    for mine, theirs in (("swarm", "auto-tune"), ("swarm", "defaults"),
                         ("auto-tune", "defaults")):
        a = [r["metric"] for r in figures[mine]]
        b = [r["metric"] for r in figures[theirs]]
        if min(b) <= 0:
            print(f"{mine} / {theirs}: {theirs} scored 0 in a round")
            continue
        ratio = paired_ratio(a, b)
        ratios[f"{mine}/{theirs}"] = [ratio.median, ratio.low, ratio.high]
        print(f"{mine} / {theirs}: x{ratio.median:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]")
    for name, setting in recipes.items():
        changed = {k: v for k, v in setting.items() if recipes["defaults"].get(k) != v}
        print(f"{name}: {json.dumps(changed, sort_keys=True) if changed else '(defaults)'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"goal": goal.model_dump(mode="json", by_alias=True),
                               "swarm_run": run_id, "recipes": recipes, "launches": launches,
                               "seconds": seconds, "grid": grid, "rounds": figures,
                               "ratios": ratios}, indent=2))
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
