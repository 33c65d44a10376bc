"""The engine factory end to end (``make bench-engine-factory``): a short engine goal, then
the default settings, the champion recipe and HF ``generate`` side by side in one run.

1. ``swarmfab run GOAL --budget B`` in a fresh store (the factory's own log is printed);
2. ``swarmfab export`` of the run, so the champion is served from its exported recipe;
3. rounds that alternate: the default recipe and the champion, each ``swarmfab serve`` in a
   child process loaded by ``loadgen`` with the goal's traffic, and
   ``KimiLinearForCausalLM.generate`` on the same prompts (static batches of the goal's
   concurrency, per-token times from a streamer, goodput by the same objective).

``--engine vllm`` compares tuners instead (``bench_engine_tuners.py``): vLLM's defaults,
the grid its ``benchmarks/auto_tune`` documents, and the swarm, each with the same budget.

Printed: medians over the rounds with the vLLM metric names (``request_goodput``,
``output_throughput``, ``p99_ttft_ms``, ``p99_tpot_ms``), and the champion / default and
champion / HF ratios of the goal's metric and of output tokens/s, with 95% bootstrap
intervals of the paired per-round ratios (none where the other side scored 0 in a round).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import run_hf

from swarmfab.engine.loadgen import random_prompts
from swarmfab.knowledge import Store
from swarmfab.measure.stats import paired_ratio
from swarmfab.serving.evaluate import EngineProcess, load_once, warm_up
from swarmfab.serving.goal import load_engine_goal
from swarmfab.serving.recipe import Recipe, engine_space

GOAL = Path(__file__).parent.parent / "examples" / "goals" / "engine-kimi-tiny.toml"
VLLM_GOAL = GOAL.with_name("engine-vllm-llama-small.toml")


def hf_round(model: Any, goal: Any, seed: int) -> dict[str, Any]:
    """HF generate on the goal's traffic: static batches of the goal's concurrency."""
    traffic = goal.traffic
    if traffic.range_ratio or traffic.prompts_file:
        raise SystemExit("HF generate runs static batches of one prompt length: give the "
                         "goal random prompts with range_ratio = 0")
    prompts = random_prompts(traffic.num_prompts, traffic.input_len,
                             model.config.vocab_size, seed)
    return run_hf(model, prompts, traffic.output_len, traffic.concurrency or len(prompts),
                  goal.objective.slos())


def main() -> None:
    if "--engine" in sys.argv:
        at = sys.argv.index("--engine")
        if sys.argv[at + 1:at + 2] != ["vllm"]:
            sys.exit("--engine: vllm (swarmfab's own engine is this script's default)")
        from bench_engine_tuners import main as tuners

        rest = sys.argv[1:at] + sys.argv[at + 2:]
        if "--goal" not in rest:
            rest += ["--goal", str(VLLM_GOAL)]
        tuners(rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goal", type=Path, default=GOAL)
    parser.add_argument("--budget", default="3m", help="the factory run's budget")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkpoints", type=Path, default=Path("out/checkpoints"),
                        help="where random:SIZE checkpoints are made once and kept (a "
                             "checkpoint written just before a run slows its first minutes)")
    parser.add_argument("--out", type=Path, default=Path("out/bench-engine-factory.json"))
    args = parser.parse_args()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    goal = load_engine_goal(args.goal)
    if goal.traffic.concurrency is None:
        sys.exit("this benchmark compares closed loops: give the goal a concurrency")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        args.checkpoints.mkdir(parents=True, exist_ok=True)
        (work / "checkpoints").symlink_to(args.checkpoints.resolve())
        goal.model_dir(work / "checkpoints")  # made (once) before anything is timed
        db = work / "runs.db"
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "swarmfab", "run", str(args.goal), "--budget",
                        args.budget, "--db", str(db), "--workdir", str(work)], check=True)
        print(f"factory run: {time.monotonic() - started:.0f} s", flush=True)
        store = Store(db)
        run = store.runs()[-1]
        model_dir = goal.model_dir(work / "checkpoints")
        space = engine_space(goal.threads)
        (work / "default").mkdir()
        (work / "default" / "recipe.json").write_text(Recipe(space.default()).to_json())
        champion_dir = work / "default"
        if store.candidate(run.champion_id or "").agent != "default":
            subprocess.run([sys.executable, "-m", "swarmfab", "export", run.id, "--db",
                            str(db), "--out", str(work / "export")], check=True)
            champion_dir = work / "export" / "engine_recipe"
        champion_settings = json.loads((champion_dir / "recipe.json").read_text())["settings"]
        from transformers import KimiLinearForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_model = KimiLinearForCausalLM.from_pretrained(str(model_dir)).eval()
        figures: dict[str, list[dict[str, Any]]] = {"default": [], "champion": [], "hf": []}
        with EngineProcess(model_dir, work / "default", work / "d.log").start(300) as default, \
                EngineProcess(model_dir, champion_dir, work / "c.log").start(300) as champion:
            warm_up(default.url, goal)
            warm_up(champion.url, goal)
            for index in range(args.rounds):
                order = [("default", default.url), ("champion", champion.url)]
                for name, url in order if index % 2 == 0 else reversed(order):
                    figures[name].append(_round(load_once(url, goal, goal.seed + index)))
                torch.set_num_threads(goal.threads)
                figures["hf"].append(_hf(hf_round(hf_model, goal, goal.seed + index), goal))
                print(f"round {index + 1}/{args.rounds}: " + ", ".join(
                    f"{name} {rows[-1]['metric']:.3g}" for name, rows in figures.items()),
                    flush=True)
    report(goal, run.id, champion_settings, figures, args.out)


def _round(row: Any) -> dict[str, Any]:
    return {"metric": row.metric, "request_goodput": row.request_goodput,
            "output_throughput": row.output_throughput, "p99_ttft_ms": row.p99_ttft_ms,
            "p99_tpot_ms": row.p99_tpot_ms}


def _hf(result: dict[str, Any], goal: Any) -> dict[str, Any]:
    goodput = float(result["request_goodput"] or 0.0)
    ttft, tpot = result["p99_ttft_ms"], result["p99_tpot_ms"]
    metric = goodput if goal.metric == "goodput" else float(result["output_throughput"])
    return {"metric": metric, "request_goodput": goodput,
            "output_throughput": result["output_throughput"], "p99_ttft_ms": ttft,
            "p99_tpot_ms": tpot}


def report(goal: Any, run_id: str, settings: dict[str, Any],
           figures: dict[str, list[dict[str, Any]]], out: Path) -> None:
    keys = ("request_goodput", "output_throughput", "p99_ttft_ms", "p99_tpot_ms")
    print(f"\nrun {run_id}; champion recipe {json.dumps(settings, sort_keys=True)}")
    print(f"traffic {goal.traffic.label()}, objective {goal.objective.slos()} ms, "
          f"{len(figures['default'])} rounds, medians\n")
    print("| system | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for name, rows in figures.items():
        print(f"| {name} | " + " | ".join(
            f"{statistics.median(r[k] for r in rows):.3g}" for k in keys) + " |")
    ratios: dict[str, dict[str, list[float] | None]] = {}
    for other in ("default", "hf"):
        ratios[other] = {}
        for metric in dict.fromkeys((goal.metric, "output_throughput")):
            mine = [float(r["metric" if metric == goal.metric else metric])
                    for r in figures["champion"]]
            theirs = [float(r["metric" if metric == goal.metric else metric])
                      for r in figures[other]]
            if min(theirs) <= 0:  # a ratio over nothing is no figure: say what happened
                ratios[other][metric] = None
                print(f"champion / {other}: {metric}: {other} scored 0 in a round "
                      f"(champion median {statistics.median(mine):.3g})")
                continue
            ratio = paired_ratio(mine, theirs)
            ratios[other][metric] = [ratio.median, ratio.low, ratio.high]
            print(f"champion / {other}: {metric} x{ratio.median:.2f} "
                  f"[{ratio.low:.2f}, {ratio.high:.2f}]")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run": run_id, "goal": goal.model_dump(mode="json"),
                               "champion": settings, "rounds": figures, "ratios": ratios},
                              indent=2))
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
