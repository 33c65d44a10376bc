"""The "outputs settled at return" probe: every case's outputs share one pause, and a late
write is still seen.

A verification's worker re-reads each case's first outputs after a pause; the cases
share that pause (the idle probe's, at the end), but for outputs in an input's memory (a
state pool decoded in place, or an output aliasing an input), which the probes refill
with the next call's values: those settle at once. The jobs run here in-process, to
count the pauses.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from swarmfab.backends import get_backend
from swarmfab.evaluation._worker import run_cases
from swarmfab.records import Candidate
from swarmfab.verify import draw_cases, probes
from swarmfab.workloads import get_workload

CANDIDATES = Path(__file__).parents[1] / "redteam" / "candidates"
SETTLED = "outputs settled at return"


def _run(file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """The verification job's runs of a red-team candidate on the corpus and two fuzz
    draws, and the length of every pause it took."""
    candidate = Candidate("kda", "python", {file: (CANDIDATES / file).read_text()}, file)
    artifact = get_backend("python").build(candidate, tmp_path)
    workload = get_workload("kda")
    cases = [*workload.validation_cases(), *draw_cases(workload, random.Random(3), 2)]
    pauses: list[float] = []
    sleep = probes.time.sleep

    def counted(seconds: float) -> None:
        pauses.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(probes.time, "sleep", counted)
    runs = run_cases("kda", artifact, cases, threads=1)
    return runs, pauses


def test_cases_share_one_pause_but_those_written_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, pauses = _run("honest_chunked.py", tmp_path, monkeypatch)
    workload = get_workload("kda")
    pools = [case for case in workload.validation_cases() if case.shape.pool]
    assert pools, "the corpus decodes a state pool in place"
    # (other probes watch the whole process, here the test's own: its threads and children)
    assert all(run.error is None and not run.findings[SETTLED] for run in runs)
    assert all(run.outputs for run in runs)  # read again after the pause, and answered
    # one pause per pool case; the other cases settle in the idle probe's pause
    assert pauses.count(probes.SETTLE_SECONDS) == len(pools)
    assert sum(p for p in pauses if p != probes.SETTLE_SECONDS) >= probes.SETTLE_SECONDS


def test_outputs_written_after_return_are_caught_on_every_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, _ = _run("py_lazy_thread.py", tmp_path, monkeypatch)
    unsettled = [run.case for run in runs if run.findings.get(SETTLED)]
    # a thread fills the outputs 8 ms after each call returns: a case whose copy at
    # return was taken after that (a preempted verifier) is the rare exception
    assert len(unsettled) >= len(runs) - 2, [(r.case, r.findings.get(SETTLED)) for r in runs]
    assert all("o" in run.findings[SETTLED] for run in runs if run.case in unsettled)
