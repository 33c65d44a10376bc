"""Do lessons transfer? Evaluations a run needs with and without an earlier related run.

For every seed: run A (KDA at one shape) builds lessons in a fresh store; then, each on
its own copy of that store, run B with lessons and the same run B with ``--no-lessons``,
for two new goals: KDA at a new shape, and GDN after KDA. Every run is the real
``swarmfab run`` command with ``--max-evaluations``, so runs are repeatable in length.

The figure of merit is the number of evaluations a run needs to reach 95% of its own
final champion speed. The champion speed after each evaluation is the product of the
speedups each new champion showed against the incumbent it replaced (the geometric mean
over shapes), which is what the gate established when it crowned it. Because the
template's starting point is often already within a few percent of the final champion,
a second column counts the evaluations to reach 95% of the search's own gain (the final
champion over the first one, on a log scale).

    python scripts/bench_transfer.py [--seeds 3] [--evaluations 12] [--out DIR]
    python scripts/bench_transfer.py --report DIR     # the table again, from kept stores
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarmfab.knowledge import Store

# shapes where the search has room: at tiny ones the starting point is already final
SOURCE = ("kda", "1,256,4,64,64")  # run A
TARGETS = {  # run B: (workload, shape)
    "kda at a new shape": ("kda", "2,512,4,64,64"),
    "gdn after kda": ("gdn", "1,256,4,64,64"),
}
REACHED = 0.95


@dataclass(frozen=True)
class Outcome:
    run_id: str
    to_reach: int | None  # evaluations to reach 95% of the final champion speed
    to_gain: int | None  # evaluations to reach 95% of the search's gain over the first champion
    final_gain: float  # the final champion's speed over the fastest baseline (chained)
    evaluations: int


def _goal(path: Path, workload: str, shape: str, seed: int) -> Path:
    b, t, h, k, v = (int(part) for part in shape.split(","))
    path.write_text(f'workload = "{workload}"\nbudget = "30m"\nthreads = 1\nseed = {seed}\n'
                    f"shapes = [{{B = {b}, T = {t}, H = {h}, K = {k}, V = {v}}}]\n")
    return path


def _run(goal: Path, store: Path, workdir: Path, evaluations: int, *extra: str) -> str:
    """One `swarmfab run`; the id of the run it recorded."""
    before = {run.id for run in Store(store).runs()}
    command = [sys.executable, "-m", "swarmfab", "run", str(goal), "--db", str(store),
               "--workdir", str(workdir), "--max-evaluations", str(evaluations), *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": "160"})
    if done.returncode not in (0, 1):  # 1: finished without a champion, still a result
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    [run_id] = [run.id for run in Store(store).runs() if run.id not in before]
    return run_id


def _outcome(store: Path, run_id: str) -> Outcome:
    gains, gain = [], 1.0
    for row, verdict in Store(store).verdicts(run_id):
        if row.became_champion and verdict.timings:
            speedup = math.exp(statistics.fmean(-math.log(t.ratio.median)
                                                for t in verdict.timings))
            against_champion = all(t.incumbent == "champion" for t in verdict.timings)
            gain = gain * speedup if against_champion else speedup
        gains.append(gain)
    final = gains[-1] if gains else 1.0
    reached = next((i + 1 for i, g in enumerate(gains) if g >= REACHED * final), None)
    first = next((g for g in gains if g != 1.0), final)
    span = math.log(final / first) if final > first else 0.0
    gained = next((i + 1 for i, g in enumerate(gains)
                   if g != 1.0 and math.log(g / first) >= REACHED * span), None)
    return Outcome(run_id, reached if final > 1.0 else None, gained, final, len(gains))


def _stored(home: Path, index: int, arm: str) -> Outcome:
    """The outcome of run B kept in ``home`` (its store holds run A too)."""
    store = home / f"b{index}-{arm}.db"
    source = {run.id for run in Store(home / "a.db").runs()}
    [run_id] = [run.id for run in Store(store).runs() if run.id not in source]
    return _outcome(store, run_id)


def _copy_store(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite store: its write-ahead log holds the latest commits,
    so copying the main file alone can lose whole runs."""
    origin, copy = sqlite3.connect(source), sqlite3.connect(target)
    try:
        origin.backup(copy)
    finally:
        origin.close()
        copy.close()


def _seed(seed: int, evaluations: int, root: Path, log: Console) -> dict[str, list[Outcome]]:
    home = root / f"seed{seed}"
    home.mkdir(parents=True)
    workdir = root / "work"  # one build cache for every run: same for both arms
    source = home / "a.db"
    a = _run(_goal(home / "a.toml", *SOURCE, seed), source, workdir, evaluations)
    log.print(f"seed {seed}: run A {a} ({SOURCE[0]} {SOURCE[1]}) done")
    results: dict[str, list[Outcome]] = {}
    for index, (name, (workload, shape)) in enumerate(TARGETS.items()):
        goal = _goal(home / f"b{index}.toml", workload, shape, seed)
        arms = []
        for arm, extra in (("lessons", ()), ("no-lessons", ("--no-lessons",))):
            store = home / f"b{index}-{arm}.db"
            _copy_store(source, store)
            run_id = _run(goal, store, workdir, evaluations, *extra)
            arms.append(_outcome(store, run_id))
            log.print(f"seed {seed}: {name}, {arm}: {arms[-1]}")
        results[name] = arms
    return results


def _median(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _table(results: dict[int, dict[str, list[Outcome]]], evaluations: int) -> Table:
    table = Table(title=f"evaluations to reach {REACHED:.0%} of the final champion speed "
                  f"(budget {evaluations} evaluations per run)", title_justify="left")
    for column in ("goal", "seed", "with lessons", "without", "gain: with", "gain: without",
                   "final speedup with", "final speedup without"):
        table.add_column(column, justify="left" if column == "goal" else "right")
    for name in TARGETS:
        columns: list[list[int | None]] = [[], [], [], []]
        for seed, by_goal in sorted(results.items()):
            lessons, plain = by_goal[name]
            for column, value in zip(columns, (lessons.to_reach, plain.to_reach,
                                               lessons.to_gain, plain.to_gain), strict=True):
                column.append(value)
            table.add_row(name, str(seed), str(lessons.to_reach), str(plain.to_reach),
                          str(lessons.to_gain), str(plain.to_gain),
                          f"{lessons.final_gain:.2f}x", f"{plain.final_gain:.2f}x")
        medians = [_median(column) for column in columns]
        table.add_row(f"[bold]{name}: median[/]", "", *(f"[bold]{m}[/]" for m in medians),
                      f"speed: {_met(medians[0], medians[1])}",
                      f"gain: {_met(medians[2], medians[3])}")
    return table


def _met(with_: float | None, without: float | None) -> str:
    """The target: with lessons in at most half the evaluations."""
    if with_ is None or without is None:
        return "n/a"
    return "met" if with_ <= without / 2 else "not met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the stores here (default: a temporary directory)")
    parser.add_argument("--report", type=Path, default=None,
                        help="print the table from the stores kept in this --out directory")
    args = parser.parse_args()
    console = Console(width=160)
    if args.report is not None:
        homes = sorted(args.report.glob("seed*"))
        console.print(_table({int(home.name[4:]): {
            name: [_stored(home, index, arm) for arm in ("lessons", "no-lessons")]
            for index, name in enumerate(TARGETS)} for home in homes}, args.evaluations))
        return
    root = args.out or Path(tempfile.mkdtemp(prefix="swarmfab-transfer-"))
    if args.out:
        root.mkdir(parents=True, exist_ok=True)
    try:
        results = {seed: _seed(seed, args.evaluations, root, console)
                   for seed in range(args.seeds)}
        console.print(_table(results, args.evaluations))
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
