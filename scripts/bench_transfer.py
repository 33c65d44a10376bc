"""Do lessons transfer? Two arms of the same search, judged against one common target.

For every seed: run A (KDA at one shape) builds lessons in a fresh store; then, each on
its own copy of that store, run B with lessons and the same run B with ``--no-lessons``,
for two new goals: KDA at a new shape, and GDN after KDA. Every run is the real
``swarmfab run`` command with ``--max-evaluations``, so runs are repeatable in length.

At the end, every candidate either arm of a goal ever crowned is timed side by side in
one job with the fastest baseline (the confirmation policy: medians and 95% CIs), so the
two arms are measured on one scale. The **common target** is the fastest of them; the
figure of merit is how many evaluations each arm's champion needed to reach 90% and 95%
of it (a run's champion after an evaluation is the last candidate crowned by then). The
two arms' final champions are compared directly: their time ratio, paired per round,
with its CI (above 1: the run with lessons ended faster).

    python scripts/bench_transfer.py [--seeds 3] [--evaluations 24] [--out DIR]
    python scripts/bench_transfer.py --report DIR     # re-time and tabulate kept stores
"""

from __future__ import annotations

import argparse
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

from swarmfab.evaluation import Implementation
from swarmfab.goal import Goal
from swarmfab.knowledge import Store
from swarmfab.measure import CONFIRMATION
from swarmfab.records import Candidate, Estimate
from swarmfab.swarm.launch import evaluator_for

# shapes where the search has room: at tiny ones the starting point is already final
SOURCE = ("kda", "1,256,4,64,64")  # run A
TARGETS = {  # run B: (workload, shape)
    "kda at a new shape": ("kda", "2,512,4,64,64"),
    "gdn after kda": ("gdn", "1,256,4,64,64"),
}
SHARES = (0.90, 0.95)
ARMS = ("lessons", "no-lessons")


@dataclass(frozen=True)
class Arm:
    """One run B: the candidates it crowned, at which evaluation."""

    run_id: str
    crowned: list[tuple[int, str]]  # (evaluation number, candidate id), in order
    evaluations: int

    @property
    def final(self) -> str | None:
        return self.crowned[-1][1] if self.crowned else None


@dataclass(frozen=True)
class Judged:
    """Both arms of one goal and seed, timed on one scale."""

    arms: dict[str, Arm]
    speed: dict[str, float]  # candidate id (and "baseline") -> speed over the baseline
    final_ratio: Estimate | None  # lessons' final champion's speed over no-lessons'

    def to_reach(self, arm: str, share: float) -> int | None:
        """Evaluations until the arm's champion reached ``share`` of the common target."""
        target = max(self.speed.values())
        if self.speed["baseline"] >= share * target:
            return 0
        return next((number for number, candidate in self.arms[arm].crowned
                     if self.speed.get(candidate, 0.0) >= share * target), None)

    def final_speed(self, arm: str) -> float:
        final = self.arms[arm].final
        return self.speed.get(final, 1.0) if final else 1.0


def _goal(path: Path, workload: str, shape: str, seed: int, threads: int = 1) -> Path:
    b, t, h, k, v = (int(part) for part in shape.split(","))
    path.write_text(f'workload = "{workload}"\nbudget = "30m"\nthreads = {threads}\n'
                    f"seed = {seed}\n"
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


def _arm(store: Path, run_id: str) -> Arm:
    verdicts = Store(store).verdicts(run_id)
    crowned = [(number, row.candidate_id) for number, (row, _) in enumerate(verdicts, 1)
               if row.became_champion]
    return Arm(run_id, crowned, len(verdicts))


def _judge(home: Path, index: int, workdir: Path, log: Console) -> Judged:
    """Time every candidate either arm crowned, side by side with the fastest baseline."""
    stores = {arm: home / f"b{index}-{arm}.db" for arm in ARMS}
    source = {run.id for run in Store(home / "a.db").runs()}
    arms = {}
    for arm, path in stores.items():
        [run_id] = [run.id for run in Store(path).runs() if run.id not in source]
        arms[arm] = _arm(path, run_id)
    store = Store(stores["no-lessons"])
    record = store.run(arms["no-lessons"].run_id)
    goal = Goal.model_validate(record.goal)
    candidates: dict[str, Candidate] = {}
    for arm, path in stores.items():
        for _, candidate_id in arms[arm].crowned:
            candidates.setdefault(candidate_id, Store(path).candidate(candidate_id))
    shapes = (record.summary or {}).get("shapes") or []
    evaluator = evaluator_for(goal, workdir, store)
    baseline = (shapes[0]["fastest_baseline"] if shapes
                else evaluator.workload.default_baselines()[0])
    # the reference is no-lessons' final champion (the baseline where it crowned none)
    order = [arms["no-lessons"].final, arms["lessons"].final, *candidates]
    names = list(dict.fromkeys(c for c in order if c is not None))
    implementations = [Implementation(c, artifact=evaluator.build(candidates[c])) for c in names]
    implementations.append(Implementation("baseline", baseline=baseline))
    [table] = evaluator.side_by_side(implementations, CONFIRMATION)
    # ratio_to_reference[x] = time of x over the reference's time; speed = baseline's / x's
    base = table.ratio_to_reference["baseline"].median
    speed = {name: base / ratio.median for name, ratio in table.ratio_to_reference.items()}
    final_ratio = None
    lessons, plain = arms["lessons"].final, arms["no-lessons"].final
    if lessons and plain:  # the reference is plain: lessons' time over it, inverted
        final_ratio = (Estimate(1.0, 1.0, 1.0) if lessons == plain
                       else table.ratio_to_reference[lessons].inverted())
    log.print(f"  {table.shape}: {len(names)} crowned candidate(s) timed with {baseline}, "
              f"{table.samples} rounds")
    return Judged(arms, speed, final_ratio)


def _copy_store(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite store: its write-ahead log holds the latest commits,
    so copying the main file alone can lose whole runs."""
    origin, copy = sqlite3.connect(source), sqlite3.connect(target)
    try:
        origin.backup(copy)
    finally:
        origin.close()
        copy.close()


def _seed(seed: int, evaluations: int, root: Path, log: Console, source_threads: int = 1
          ) -> None:
    home = root / f"seed{seed}"
    home.mkdir(parents=True)
    workdir = root / "work"  # one build cache for every run: same for both arms
    source = home / "a.db"
    a = _run(_goal(home / "a.toml", *SOURCE, seed, source_threads), source, workdir,
             evaluations)
    log.print(f"seed {seed}: run A {a} ({SOURCE[0]} {SOURCE[1]}) done")
    for index, (name, (workload, shape)) in enumerate(TARGETS.items()):
        goal = _goal(home / f"b{index}.toml", workload, shape, seed)
        for arm in ARMS:
            store = home / f"b{index}-{arm}.db"
            _copy_store(source, store)
            run_id = _run(goal, store, workdir, evaluations,
                          *(("--no-lessons",) if arm == "no-lessons" else ()))
            log.print(f"seed {seed}: {name}, {arm}: run {run_id}")


def _judge_all(root: Path, log: Console) -> dict[int, dict[str, Judged]]:
    results: dict[int, dict[str, Judged]] = {}
    for home in sorted(root.glob("seed*")):
        seed = int(home.name[4:])
        log.print(f"seed {seed}: timing both arms' champions side by side")
        results[seed] = {name: _judge(home, index, root / "work", log)
                         for index, name in enumerate(TARGETS)}
    return results


def _median(values: list[int | None], evaluations: int) -> float:
    """Median evaluations; an arm that never reached the target counts as one more than
    the budget."""
    return statistics.median(evaluations + 1 if v is None else v for v in values)


def _shown(value: int | None, evaluations: int) -> str:
    return f">{evaluations}" if value is None else str(value)


def _table(results: dict[int, dict[str, Judged]], evaluations: int) -> Table:
    table = Table(title=f"evaluations to reach 90% / 95% of the common target (the fastest "
                  f"champion either arm found, timed side by side; {evaluations} evaluations "
                  "per run)", title_justify="left")
    for column in ("goal", "seed", "with lessons", "without", "final speed with",
                   "final speed without", "with / without [95% CI]"):
        table.add_column(column, justify="left" if column == "goal" else "right")
    for name in TARGETS:
        reach: dict[tuple[str, float], list[int | None]] = {}
        ratios = []
        for seed, by_goal in sorted(results.items()):
            judged = by_goal[name]
            cells = []
            for arm in ARMS:
                values = [judged.to_reach(arm, share) for share in SHARES]
                for share, value in zip(SHARES, values, strict=True):
                    reach.setdefault((arm, share), []).append(value)
                cells.append(" / ".join(_shown(v, evaluations) for v in values))
            ratio = judged.final_ratio
            if ratio is not None:
                ratios.append(ratio)
            table.add_row(name, str(seed), *cells, f"{judged.final_speed('lessons'):.2f}x",
                          f"{judged.final_speed('no-lessons'):.2f}x",
                          "-" if ratio is None else
                          f"{ratio.median:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]")
        medians = {key: _median(values, evaluations) for key, values in reach.items()}
        with95, without95 = medians[("lessons", 0.95)], medians[("no-lessons", 0.95)]
        met = "met" if with95 <= without95 / 2 else "not met"
        worse = sum(r.high < 1.0 for r in ratios)
        table.add_row(
            f"[bold]{name}: median[/]", "",
            f"[bold]{medians[('lessons', 0.90)]:g} / {with95:g}[/]",
            f"[bold]{medians[('no-lessons', 0.90)]:g} / {without95:g}[/]",
            f"95%: {met} (at most half)", "",
            f"{'never' if worse == 0 else f'{worse} seed(s)'} significantly slower")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=24)
    parser.add_argument("--source-threads", type=int, default=1,
                        help="threads of run A: 2 or more puts its lessons and champion in "
                             "another device class than the runs B (1 thread)")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the stores here (default: a temporary directory)")
    parser.add_argument("--report", type=Path, default=None,
                        help="re-time and tabulate the stores kept in this --out directory")
    args = parser.parse_args()
    console = Console(width=160)
    if args.report is not None:
        console.print(_table(_judge_all(args.report, console), args.evaluations))
        return
    root = args.out or Path(tempfile.mkdtemp(prefix="swarmfab-transfer-"))
    if args.out:
        root.mkdir(parents=True, exist_ok=True)
    try:
        for seed in range(args.seeds):
            _seed(seed, args.evaluations, root, console, args.source_threads)
        console.print(_table(_judge_all(root, console), args.evaluations))
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
