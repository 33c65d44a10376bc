"""The knowledge store: runs, candidates and verdicts survive a round trip and a reopen."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarmfab.errors import StoreError
from swarmfab.knowledge import Store, database_url
from swarmfab.records import (
    Candidate,
    CheckResult,
    Estimate,
    ShapeTiming,
    Status,
    Verdict,
)

GOAL = {"workload": "kda", "budget": 40.0}
HOST = {"machine": "x86_64", "threads": 2}


def _candidate(tag: str, parents: tuple[str, ...] = ()) -> Candidate:
    return Candidate("kda", "c", {"k.c": f"/* {tag} */ int kda_forward(void) {{ return 0; }}"},
                     "k.c", flags=("-O2",), knobs={"tile_v": 16, "passes": "fused"},
                     parents=parents, agent="builtin-tiling", rationale=f"because {tag}")


def _accepted(candidate: Candidate) -> Verdict:
    ratio = Estimate(0.5, 0.45, 0.55)
    incumbent = Estimate(2e-3, 1.9e-3, 2.2e-3)
    return Verdict(
        candidate.id, Status.ACCEPTED, "verified; 2.00x",
        checks=(CheckResult("decode", "o matches reference", True, "fine", 1e-7, 2e-7),
                CheckResult("decode", "inputs unchanged", True)),
        timings=(ShapeTiming("B1 T256 H4 K64 V64", "torch-chunked", incumbent.scaled(0.5),
                             incumbent, ratio, "faster", 17, None),),
        elapsed_s=1.25,
    )


def _rejected(candidate: Candidate) -> Verdict:
    return Verdict(candidate.id, Status.REJECTED, "case 'decode': o matches reference failed",
                   checks=(CheckResult("decode", "o matches reference", False, "rms 1e-1",
                                       0.1, 0.3),),
                   elapsed_s=0.5, diagnostics=("k.c:1: error: nope",))


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Every store test runs on a SQLite file and on a real PostgreSQL database."""
    if request.param == "postgresql":
        return Store(request.getfixturevalue("postgres_url"))
    return Store(tmp_path / "x.db")


def test_verdicts_round_trip(store: Store) -> None:
    run = store.start_run("kda", GOAL, HOST)
    good, bad = _candidate("good"), _candidate("bad")
    store.record(run, good, _accepted(good))
    store.record(run, bad, _rejected(bad))
    rows = store.verdicts(run)
    assert [row.candidate_id for row, _ in rows] == [good.id, bad.id]
    assert [verdict for _, verdict in rows] == [_accepted(good), _rejected(bad)]
    row, verdict = rows[0]
    assert verdict.status is Status.ACCEPTED
    assert verdict.timings[0].ratio == Estimate(0.5, 0.45, 0.55)
    assert verdict.checks[0].rms_ratio == 1e-7
    assert row.status == "accepted"
    assert row.speedup == pytest.approx(2.0)  # worst-shape speedup, 1 / 0.5
    assert row.agent == "builtin-tiling"
    assert rows[1][0].speedup is None


def test_candidates_round_trip(store: Store) -> None:
    run = store.start_run("kda", GOAL, HOST)
    parent = _candidate("parent")
    child = _candidate("child", parents=(parent.id,))
    store.record(run, child, _accepted(child))
    assert store.candidate(child.id) == child
    with pytest.raises(StoreError, match="no candidate"):
        store.candidate("feedfacefeedface")


def test_champion_evaluated_ids_and_counts(store: Store) -> None:
    run = store.start_run("kda", GOAL, HOST)
    good, bad, other = _candidate("good"), _candidate("bad"), _candidate("other")
    store.record(run, good, _accepted(good))
    store.record(run, bad, _rejected(bad))
    store.record(run, other, _accepted(other))
    store.set_champion(run, good.id)
    record = store.run(run)
    assert record.champion_id == good.id
    assert record.status == "running"
    assert [row.became_champion for row, _ in store.verdicts(run)] == [True, False, False]
    assert store.evaluated_ids(run) == {good.id, bad.id, other.id}
    assert store.status_counts(run) == {"accepted": 2, "rejected": 1}
    assert sorted(store.accepted(run)) == sorted([good.id, other.id])


def test_crowning_a_candidate_without_a_verdict_in_the_run_fails(store: Store) -> None:
    first = store.start_run("kda", GOAL, HOST)
    second = store.start_run("kda", GOAL, HOST)
    good = _candidate("good")
    store.record(first, good, _accepted(good))
    with pytest.raises(StoreError, match="cannot crown"):
        store.set_champion(second, good.id)
    assert store.run(second).champion_id is None
    assert store.evaluated_ids(second) == set()


def test_finish_run_records_status_and_summary(store: Store) -> None:
    run = store.start_run("kda", GOAL, HOST)
    store.finish_run(run, "finished", {"champion": None, "shapes": []})
    record = store.run(run)
    assert (record.status, record.summary) == ("finished", {"champion": None, "shapes": []})
    assert record.finished_at is not None
    assert (record.workload, record.goal, record.host) == ("kda", GOAL, HOST)
    with pytest.raises(StoreError):
        store.finish_run("nope", "finished", None)


def test_run_none_is_the_latest_and_unknown_runs_raise(store: Store) -> None:
    with pytest.raises(StoreError, match="no runs"):
        store.run(None)
    first = store.start_run("kda", GOAL, HOST)
    time.sleep(0.01)
    second = store.start_run("kda", GOAL, HOST)
    assert first != second
    assert store.run(None).id == second
    assert [r.id for r in store.runs()] == [first, second]
    with pytest.raises(StoreError, match="no run 'missing'"):
        store.run("missing")


def test_a_second_store_on_the_same_file_sees_the_data(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    writer = Store(path)
    run = writer.start_run("kda", GOAL, HOST)
    good = _candidate("good")
    writer.record(run, good, _accepted(good))
    writer.set_champion(run, good.id)

    reader = Store(path)
    assert reader.run(None).id == run
    assert reader.run(run).champion_id == good.id
    assert [v for _, v in reader.verdicts(run)] == [_accepted(good)]
    assert reader.candidate(good.id) == good


def test_recording_the_same_candidate_twice_in_one_run_is_refused(store: Store) -> None:
    run = store.start_run("kda", GOAL, HOST)
    good = _candidate("good")
    store.record(run, good, _accepted(good))
    with pytest.raises(StoreError):
        store.record(run, good, _accepted(good))
    assert len(store.verdicts(run)) == 1  # the failed write left nothing behind
    other_run = store.start_run("kda", GOAL, HOST)
    store.record(other_run, good, _accepted(good))  # same candidate, another run: fine
    assert store.evaluated_ids(other_run) == {good.id}


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    Store(path)
    connection = sqlite3.connect(path)
    with connection:  # commits
        connection.execute("UPDATE swarmfab_meta SET value = '999' WHERE key = 'schema_version'")
    connection.close()
    with pytest.raises(StoreError, match="schema version 999"):
        Store(path)


def test_database_url_accepts_paths_and_urls(tmp_path: Path) -> None:
    assert database_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert database_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    nested = tmp_path / "a" / "b" / "s.db"
    assert database_url(nested) == f"sqlite:///{nested}"
    assert nested.parent.is_dir()  # created so SQLite can open the file


def test_a_measurement_is_kept_replaced_and_missed_by_any_other_key(store: Store) -> None:
    key = "baselines v1 | kda | B1 T256 H4 K64 V64 | host A | 2 threads | torch 2.13.0"
    assert store.measurement(key) is None
    store.save_measurement(key, {"torch-recurrent": 0.02, "torch-chunked": 0.01})
    store.save_measurement(key, {"torch-recurrent": 0.03, "torch-chunked": 0.01})
    assert store.measurement(key) == {"torch-recurrent": 0.03, "torch-chunked": 0.01}
    assert store.measurement(key.replace("host A", "host B")) is None


_FILL = """
import json, sys
from swarmfab.errors import StoreError
from swarmfab.knowledge import Store
store = Store(sys.argv[1])
run = store.start_run("kda", {"workload": "kda"}, {"cpu": "test"})
written, message = 0, None
try:
    for index in range(10_000):
        store.record_event(run, "fill", f"{index}:" + "x" * 8192)
        written += 1
except StoreError as exc:
    message = str(exc)
read = [detail.split(":")[0] for _, detail in store.events(run, "fill")]
print(json.dumps({"written": written, "read": read, "message": message}))
"""


def test_a_store_on_a_full_disk_says_so_and_keeps_what_it_holds(
    small_disk: tuple[Path, Any],
) -> None:
    """SQLite on a 512 KiB file system, written until it is full: the error names the
    full disk, and every write that succeeded reads back."""
    mount, run = small_disk
    done = run([sys.executable, "-c", _FILL, str(mount / "x.db")], "512k")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert 10 < result["written"] < 10_000
    assert result["message"] is not None and "out of disk space" in result["message"]
    assert "intact" in result["message"]
    assert result["read"] == [str(index) for index in range(result["written"])]


def test_reading_runs_does_not_import_torch(tmp_path: Path) -> None:
    """Reading the store needs SQLAlchemy, not torch (2.5 s of imports on a 2-core host):
    ``swarmfab runs``, ``show``, ``report`` and ``--help`` answer without it."""
    import subprocess

    db = tmp_path / "x.db"
    store = Store(db)
    run = store.start_run("kda", GOAL, HOST)
    store.finish_run(run, "finished", {"champion": None, "shapes": []})
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom swarmfab.cli import app\n"
            "for args in (['runs'], ['show'], ['report'], ['report', '--json']):\n"
            f"    done = CliRunner().invoke(app, [*args, '--db', {str(db)!r}])\n"
            "    assert done.exit_code == 0, (args, done.output)\n"
            "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'torch')[:3])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
