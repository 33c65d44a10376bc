"""Evaluations per minute with 1 and 2 workers, and the platform's own overhead.

Runs the same short `swarmfab run` (one thread per benchmark, so two benchmarks fit side
by side on a 2-core host) with ``--workers 1`` and ``--workers 2``, alternating, several
times each; prints medians with 95% bootstrap intervals. Usage:

    python scripts/bench_swarm.py [--repeats 3] [--budget 45s]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from swarmfab.measure.stats import median_ci

GOAL = """workload = "kda"
threads = 1
seed = {seed}
shapes = [{{B = 1, T = 256, H = 4, K = 64, V = 64}}]
"""


def one_run(workers: int, budget: str, seed: int, scratch: Path) -> dict[str, float]:
    goal = scratch / f"goal-{workers}-{seed}.toml"
    goal.write_text(GOAL.format(seed=seed))
    db = scratch / f"w{workers}-s{seed}.db"
    common = ["--db", str(db)]
    subprocess.run([sys.executable, "-m", "swarmfab", "run", str(goal), "--budget", budget,
                    "--workers", str(workers), "--workdir", str(scratch / "work"), *common],
                   check=True, capture_output=True, text=True)
    shown = subprocess.run([sys.executable, "-m", "swarmfab", "show", "--json", *common],
                           check=True, capture_output=True, text=True)
    shown_run = json.loads(shown.stdout)
    search = shown_run["search"]
    return {"per_minute": 60 * search["evaluations"] / search["seconds"],
            "overhead": shown_run["overhead"], "evaluations": search["evaluations"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", default="45s")
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="swarmfab-bench-swarm-") as scratch:
        for repeat in range(args.repeats):
            for workers in (1, 2) if repeat % 2 == 0 else (2, 1):
                row = one_run(workers, args.budget, repeat, Path(scratch))
                results[workers].append(row)
                print(f"  workers {workers}, seed {repeat}: {row['evaluations']} evaluations, "
                      f"{row['per_minute']:.1f}/min, overhead {row['overhead']:.1%}", flush=True)
    print(f"\n{'workers':<8} {'evaluations/min [95% CI]':<28} {'platform overhead [95% CI]'}")
    for workers, rows in results.items():
        rate = median_ci([r["per_minute"] for r in rows])
        cost = median_ci([r["overhead"] for r in rows])
        print(f"{workers:<8} {rate.median:5.1f} [{rate.low:.1f}, {rate.high:.1f}]{'':<14}"
              f"{cost.median:.1%} [{cost.low:.1%}, {cost.high:.1%}]")
    one = median_ci([r["per_minute"] for r in results[1]]).median
    two = median_ci([r["per_minute"] for r in results[2]]).median
    print(f"\n2 workers / 1 worker: {two / one:.2f}x evaluations per minute "
          f"({args.repeats} runs each, alternating)")


if __name__ == "__main__":
    main()
