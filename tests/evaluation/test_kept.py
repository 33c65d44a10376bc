"""Battery verdicts kept per code, setting, host and toolchain (evaluation/_kept.py)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from pathlib import Path

import pytest
import torch

from swarmfab.backends import SHARED_BUILDS_ENV
from swarmfab.evaluation._kept import KEPT_NOTE, KeptVerdicts
from swarmfab.records import Candidate, CheckResult, Status, Verdict
from swarmfab.workloads import get_workload

KDA = get_workload("kda")
CANDIDATE = Candidate("kda", "python", {"k.py": "def forward(*a): pass\n"}, "k.py")
ACCEPTED = Verdict(CANDIDATE.id, Status.ACCEPTED, "correct on the battery's 12 cases",
                   (CheckResult("battery: beta exactly 1", "o matches reference", True),),
                   elapsed_s=9.5)


def _kept(work: Path, threads: int = 1, **changes: object) -> KeptVerdicts:
    setting = {"threads": threads, "dtype": "float32", "device": "cpu",
               "tolerances": KDA.tolerances(torch.float32), **changes}
    return KeptVerdicts(work, KDA, **setting)  # type: ignore[arg-type]


def test_an_accepted_verdict_is_kept_and_a_rejection_never(tmp_path: Path) -> None:
    cases = KDA.battery_cases(1)
    kept = _kept(tmp_path)
    key = kept.key(CANDIDATE, cases)
    assert kept.get(key) is None
    kept.put(key, ACCEPTED)
    assert _kept(tmp_path).get(key) == ACCEPTED  # another evaluator, the same work dir

    rejected = dataclasses.replace(ACCEPTED, status=Status.REJECTED, reason="o: NaN")
    other = kept.key(dataclasses.replace(CANDIDATE, flags=("-O2",)), cases)
    kept.put(other, rejected)
    assert kept.get(other) is None and not (tmp_path / "battery" / f"{other}.json").exists()


def test_whatever_decides_the_verdict_is_in_the_key(tmp_path: Path) -> None:
    cases = KDA.battery_cases(1)
    key = _kept(tmp_path).key(CANDIDATE, cases)
    loose = dataclasses.replace(KDA.tolerances(torch.float32), rms_ratio=0.5)
    others = {
        "another candidate": _kept(tmp_path).key(
            dataclasses.replace(CANDIDATE, sources={"k.py": "def forward(*a): return 1\n"}),
            cases),
        "other cases": _kept(tmp_path).key(CANDIDATE, cases[:-1]),
        "a case's values": _kept(tmp_path).key(CANDIDATE, [
            dataclasses.replace(cases[0], distribution=dataclasses.replace(
                cases[0].distribution, magnitude=2.0)), *cases[1:]]),
        "threads": _kept(tmp_path, threads=2).key(CANDIDATE, cases),
        "dtype": _kept(tmp_path, dtype="bfloat16").key(CANDIDATE, cases),
        "tolerances": _kept(tmp_path, tolerances=loose).key(CANDIDATE, cases),
    }
    assert key not in others.values() and len(set(others.values())) == len(others)
    # a case's secret seed is not part of it: each evaluator salts its own
    salted = [dataclasses.replace(case, seed=case.seed + 12345) for case in cases]
    assert _kept(tmp_path).key(CANDIDATE, salted) == key


def test_a_shared_directory_serves_every_work_dir_and_a_torn_file_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED_BUILDS_ENV, str(tmp_path / "shared"))
    cases = KDA.battery_cases(1)
    first = _kept(tmp_path / "one")
    key = first.key(CANDIDATE, cases)
    first.put(key, ACCEPTED)
    assert _kept(tmp_path / "two").get(key) == ACCEPTED

    for directory in (tmp_path / "one" / "battery", tmp_path / "shared" / "battery"):
        (directory / f"{key}.json").write_text('{"candidate_id": ')
    assert _kept(tmp_path / "two").get(key) is None
    # a directory that cannot be written is passed over, not an error
    (tmp_path / "blocked").write_text("a file where the directory should be")
    _kept(tmp_path / "blocked").put(key, ACCEPTED)


def _judge_once(work: Path, shared: Path, status: str, counter: Path) -> None:
    """A process judging CANDIDATE: the judge takes a second and counts its calls."""
    import os

    os.environ[SHARED_BUILDS_ENV] = str(shared)

    def judge() -> Verdict:
        with counter.open("a") as calls:
            calls.write("judged\n")
        time.sleep(1.0)
        return dataclasses.replace(ACCEPTED, status=Status(status))

    verdict = _kept(work).judged(CANDIDATE, KDA.battery_cases(1), judge)
    work.mkdir(parents=True, exist_ok=True)
    (work / "reason").write_text(verdict.reason)


@pytest.mark.parametrize("status", ["accepted", "rejected"])
def test_two_processes_with_one_cache_judge_the_same_code_once(
        tmp_path: Path, status: str) -> None:
    """Two runs sharing a build cache crown the same code at once: the second waits for
    the first's verdict; after a rejection, it judges for itself."""
    counter = tmp_path / "calls"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_judge_once, args=(
        tmp_path / name, tmp_path / "shared", status, counter)) for name in ("one", "two")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    calls = counter.read_text().splitlines()
    reasons = sorted((tmp_path / name / "reason").read_text() for name in ("one", "two"))
    if status == "accepted":
        assert len(calls) == 1
        assert reasons[0] == ACCEPTED.reason and KEPT_NOTE in reasons[1]
    else:
        assert len(calls) == 2 and all(KEPT_NOTE not in reason for reason in reasons)
