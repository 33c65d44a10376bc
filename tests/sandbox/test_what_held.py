"""Each isolation step says whether it held, and what a job ran under follows from that:
forced to fail one by one (in a child confined as a job is), each step is named, the
guarantee it carried goes missing, a hostile attempt gets through where nothing else
stood in for it, and the verdict, ``swarmfab show`` and ``swarmfab doctor`` say so. A
strict job (untrusted code) is not run where isolation is weak."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import session_jobs
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.evaluation import Implementation
from swarmfab.evaluation._limits import held, job_limits, trusted
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.sandbox import (
    GUARANTEES,
    Isolation,
    JobOutcome,
    JobStatus,
    Limits,
    WeakSandboxError,
    _report,
    _steps,
    run_job,
    start_session,
)
from swarmfab.sandbox._landlock import Ruleset
from swarmfab.sandbox.probe import isolation_here
from swarmfab.swarm.doctor import lines
from swarmfab.workloads import get_workload

ROOT = os.geteuid() == 0


def _fail(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Make ``step`` not take effect in children forked from here on."""
    failing = {
        _report.USER_NAMESPACE: "enter_user_namespace",
        _report.NETWORK_NAMESPACE: "isolate_network",
        _report.READ_ONLY_MOUNTS: "confine_filesystem",
        _report.USER_NOBODY: "drop_privileges",
        _report.NO_CAPABILITIES: "drop_capabilities",
        _report.SECCOMP: "forbid_processes_and_sockets",
    }
    if step == _report.LANDLOCK:  # a kernel without Landlock
        monkeypatch.setattr(_steps, "job_ruleset", lambda *a, **k: Ruleset(abi=0))
    else:
        monkeypatch.setattr(_steps, failing[step], lambda *a, **k: False)


def _baseline(user: str | None) -> dict[str, object]:
    found = isolation_here(user)
    if "error" in found:
        pytest.skip(f"no child could be confined here: {found['error']}")
    return found


@pytest.mark.parametrize("step", [_report.NETWORK_NAMESPACE, _report.READ_ONLY_MOUNTS,
                                  _report.NO_CAPABILITIES, _report.LANDLOCK, _report.SECCOMP,
                                  _report.USER_NAMESPACE])
def test_a_step_that_does_not_hold_is_named_and_weakens_what_it_gave(
        monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    # root enters no user namespace: an ordinary user's job does (root's probe runs one)
    user = "nobody" if ROOT and step == _report.USER_NAMESPACE else None
    before = _baseline(user)
    if step not in before["held"]:
        pytest.skip(f"{step} does not hold on this host to begin with ({before['failed']})")
    _fail(monkeypatch, step)
    found = isolation_here(user)
    assert step in found["failed"] and step not in found["held"], found
    steps = {name: True for name in found["held"]} | {name: False for name in found["failed"]}
    derived = Isolation.derive(steps)
    assert found["level"] == derived.level and list(found["missing"]) == list(derived.missing)
    attempts = found["attempts"]
    if step == _report.LANDLOCK and not ROOT:  # nothing else keeps a user's home unread
        assert "private files unread" in found["missing"]
        assert attempts["read home"] == "done"
    if step == _report.LANDLOCK and ROOT and _report.USER_NOBODY not in found["held"]:
        assert found["level"] == "partial" and "private files unread" in found["missing"]
    if step == _report.SECCOMP:  # only seccomp forbids new processes
        assert found["missing"] == ["no new processes"] and attempts["processes"] == "done"
    if step == _report.USER_NAMESPACE:  # no namespace steps without it; Landlock stands
        assert {_report.NETWORK_NAMESPACE, _report.READ_ONLY_MOUNTS} <= set(found["failed"])
    if step in (_report.NETWORK_NAMESPACE, _report.READ_ONLY_MOUNTS, _report.NO_CAPABILITIES,
                _report.USER_NAMESPACE):
        assert found["level"] == "full"  # the other steps stand in for it
        assert all(got.startswith("refused") for got in attempts.values()), attempts
    assert not found["escaped"] or found["level"] != "full"
    doctor = lines({"host": {"cpu": "c", "machine": "m", "cores": 1, "kernel": "k",
                             "python": "p", "user": "u", "isa": "i"},
                    "compilers": {}, "torch": {"version": "t", "cuda build": None},
                    "sandbox": {"means": {}, "this user": found},
                    "ray": {"importable": False}, "postgresql": {
                        "programs": {}, "psycopg": {"importable": False}},
                    "gpu": {"triton": {"importable": False}},
                    "caches": {"user cache": {"path": "/c", "bytes": None, "entries": {}},
                               "workdir": {"path": "/w", "bytes": None}}})
    line = next(text for text in doctor if text.startswith("sandbox for this user:"))
    assert f"did not hold: {', '.join(found['failed'])}" in line, line
    assert line.split(": ", 1)[1].startswith(str(found["level"]))


def test_the_guarantees_follow_from_the_steps() -> None:
    every = dict.fromkeys(_report.STEPS, True)
    assert Isolation.derive(every).level == "full"
    assert [name for name, _ in Isolation.derive(every).guarantees] == list(GUARANTEES)
    assert Isolation.derive({}).level == "none"
    assert Isolation.off().level == "off"
    # read-only mounts hold writes only where the job cannot undo them
    mounts = {_report.READ_ONLY_MOUNTS: True}
    assert "writes confined" in Isolation.derive(mounts).missing
    assert "writes confined" not in Isolation.derive(
        {**mounts, _report.NO_CAPABILITIES: True}).missing
    # a job that may start processes needs no seccomp for that
    assert "no new processes" not in Isolation.derive({}, allow_processes=True).missing


def test_a_verdict_records_what_held_and_show_says_so(tmp_path: Path) -> None:
    weak = Isolation.derive({**dict.fromkeys(_report.STEPS, True), _report.LANDLOCK: False,
                             _report.USER_NOBODY: False})
    candidate = Candidate("kda", "python", {"k.py": "x = 1\n"}, "k.py")
    verdict = held(Verdict(candidate.id, Status.ACCEPTED, "correct"),
                   JobOutcome(JobStatus.OK, isolation=weak))
    assert verdict.isolation.level == "partial"
    assert verdict.isolation.missing == ("private files unread",)
    assert "landlock" in verdict.isolation.failed
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
    assert held(Verdict(candidate.id, Status.ACCEPTED, "timed"), verdict).isolation == \
        verdict.isolation  # the benchmark's verdict keeps the verification's record
    db = tmp_path / "x.db"
    store = Store(db)
    run = store.start_run("kda", {"workload": "kda"}, {"machine": "x86_64"})
    store.record(run, candidate, verdict)
    store.finish_run(run, "finished", {})
    shown = CliRunner().invoke(app, ["show", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    line = next(text for text in shown.output.splitlines() if "isolation:" in text)
    assert "partial in 1 of 1" in line and "missing: private files unread" in line, line
    data = json.loads(CliRunner().invoke(app, ["show", "--db", str(db), "--json"]).output)
    assert data["isolation"]["by_level"] == {"partial": 1}
    report = json.loads(CliRunner().invoke(app, ["report", "--db", str(db), "--json"]).output)
    assert report["verdicts"][0]["isolation"] == "partial"


def test_a_strict_job_is_not_run_where_isolation_is_weak(tmp_path: Path) -> None:
    """No isolation at all (isolate=False) is the weakest there is: a strict job refuses
    it, before its code runs; a job that is not strict runs and says what held."""
    marker = tmp_path / "ran"
    with pytest.raises(WeakSandboxError, match="--allow-weak-sandbox"):
        run_job(Path.touch, marker, limits=Limits(isolate=False, strict=True))
    assert not marker.exists()
    with pytest.raises(WeakSandboxError), start_session(session_jobs.echo, "> ",
                       limits=Limits(isolate=False, strict=True)) as session:
        session.ask("hello")
    outcome = run_job(divmod, 7, 2, limits=Limits(isolate=False))
    assert outcome.value == (3, 1) and outcome.isolation == Isolation.off()
    confined = run_job(divmod, 7, 2, limits=Limits(strict=True))
    if confined.isolation is not None and confined.isolation.level != "full":
        pytest.skip(f"isolation is not full here: {confined.isolation.describe()}")
    assert confined.value == (3, 1)


def test_untrusted_code_is_strict_unless_the_user_allows_weak_isolation(
        tmp_path: Path) -> None:
    workload = get_workload("kda")
    from swarmfab.backends import Artifact

    artifact = Artifact("python", tmp_path / "k.py")
    template = Candidate("kda", "c", {"k.c": ""}, "k.c", knobs={"algorithm": "recurrent"})
    written = Candidate("kda", "python", {"k.py": ""}, "k.py", agent="llm-1")
    base = Limits()

    def strict(*implementations: Implementation, limits: Limits = base) -> bool:
        return job_limits(limits, "cpu", workload, tmp_path, list(implementations)).strict

    assert trusted(template) and not trusted(written) and not trusted(None)
    assert strict(Implementation("candidate", artifact, source=written))
    assert strict(Implementation("champion", artifact))  # of unknown origin
    assert not strict(Implementation("candidate", artifact, source=template))
    assert not strict(Implementation("torch-chunked", baseline="torch-chunked"))
    assert not strict(Implementation("candidate", artifact, source=written),
                      limits=Limits(allow_weak=True))
