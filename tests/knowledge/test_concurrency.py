"""Several processes writing to one store at once: nobody fails, nothing is lost.

Processes open a fresh store at the same moment (so they race to migrate it) and then
record the same candidates, corpus cases and host peaks in runs of their own; and two
real `swarmfab run` commands share one PostgreSQL database.
"""

from __future__ import annotations

import multiprocessing
import random
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from swarmfab.knowledge import Store
from swarmfab.knowledge._schema import CandidateRow, CaseRow
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, Estimate, ShapeTiming, Status, Verdict
from swarmfab.workloads import Case, Shape

WRITERS, CANDIDATES, CASES = 3, 25, 5


def _candidate(number: int) -> Candidate:
    return Candidate("kda", "c", {"k.c": f"/* {number} */"}, "k.c",
                     knobs={"tile_v": number}, agent="builtin-tiling")


def _verdict(candidate: Candidate) -> Verdict:
    time = Estimate(1e-3, 0.9e-3, 1.1e-3)
    return Verdict(candidate.id, Status.ACCEPTED, "verified", timings=(ShapeTiming(
        "B1 T64 H2 K16 V16", "torch-recurrent", time, time, Estimate(1, 0.9, 1.1),
        "indistinguishable", 5),))


def _writer(url: str, seed: int, start: multiprocessing.synchronize.Event,
            done: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    start.wait()
    store = Store(url)
    run = store.start_run("kda", {"workload": "kda"}, {"threads": 1})
    order = list(range(CANDIDATES))
    random.Random(seed).shuffle(order)
    added = 0
    for index, number in enumerate(order):
        candidate = _candidate(number)
        store.record(run, candidate, _verdict(candidate))
        if index < CASES:
            case = Case(f"shared-{index}", Shape(B=1, T=4, H=1, HV=1, K=4, V=4), seed=index)
            added += store.add_case("kda", case, run)
        store.save_host_peaks(HostPeaks("shared host", 1e9 * (seed + 1), 1e9))
    store.finish_run(run, "finished", None)
    done.put((run, added))


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_concurrent_writers_share_one_store(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if dialect == "postgresql" else str(
        tmp_path / "shared.db")
    context = multiprocessing.get_context("fork")
    start, done = context.Event(), context.Queue()
    writers = [context.Process(target=_writer, args=(url, seed, start, done))
               for seed in range(WRITERS)]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(120)
    assert [writer.exitcode for writer in writers] == [0] * WRITERS
    results = [done.get(timeout=5) for _ in writers]

    store = Store(url)
    for run, _ in results:
        assert store.run(run).status == "finished"
        assert len(store.verdicts(run)) == CANDIDATES
        assert store.evaluated_ids(run) == {_candidate(n).id for n in range(CANDIDATES)}
    assert sum(added for _, added in results) == CASES  # each case added exactly once
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == CANDIDATES
        assert s.scalar(select(func.count()).select_from(CaseRow)) == CASES
    assert store.host_peaks("shared host") is not None


GOAL = """workload = "kda"
budget = "300s"  # not what ends the run: max_evaluations does
threads = 1
max_evaluations = 2
[[shapes]]
B = 1
T = 64
H = 2
K = 16
V = 16
"""


@pytest.mark.slow
@pytest.mark.integration  # two whole runs on a PostgreSQL server: make test-integration's
def test_two_swarmfab_runs_share_one_postgresql_store(tmp_path: Path, postgres_url: str) -> None:
    (tmp_path / "goal.toml").write_text(GOAL)
    runs = [subprocess.Popen(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--seed", str(seed), "--db",
         postgres_url, "--workdir", str(tmp_path / f"work{seed}")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) for seed in (1, 2)]
    outputs = [run.communicate(timeout=240)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], "\n".join(outputs)

    store = Store(postgres_url)
    recorded = store.runs()
    assert len(recorded) == 2 and {run.status for run in recorded} == {"finished"}
    for run in recorded:
        verdicts = store.verdicts(run.id)
        assert len(verdicts) == 2  # every evaluation of each run is there, once
        assert len({row.candidate_id for row, _ in verdicts}) == 2
        assert run.champion_id in {row.candidate_id for row, _ in verdicts}
    # both started from the same default: that candidate is stored once, judged twice
    shared = store.evaluated_ids(recorded[0].id) & store.evaluated_ids(recorded[1].id)
    assert shared
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == 4 - len(shared)
    assert {row.run_id for row in store.lesson_evidence()} <= {run.id for run in recorded}
