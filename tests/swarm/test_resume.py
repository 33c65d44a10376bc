"""A run survives Ctrl-C and kill -9: nothing recorded is lost, nothing judged twice.

One run takes both, one after the other (each resumed): the goal's setup and first
evaluations are paid once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

GOAL = """workload = "kda"
budget = "60s"
threads = 1
[[shapes]]
B = 1
T = 64
H = 2
K = 16
V = 16
"""


def _swarmfab(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarmfab", *args, "--db", str(tmp_path / "x.db"),
         "--workdir", str(tmp_path / "work")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _verdicts(tmp_path: Path) -> tuple[int, int]:
    """(verdicts, distinct candidates) recorded so far."""
    with sqlite3.connect(tmp_path / "x.db") as db:
        try:
            row = db.execute("select count(*), count(distinct candidate_id) from verdicts")
            total, distinct = row.fetchone()
        except sqlite3.OperationalError:  # tables not created yet
            return 0, 0
    return int(total), int(distinct)


def _wait_for_verdicts(tmp_path: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while _verdicts(tmp_path)[0] < count:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, "the run recorded too few verdicts"
        time.sleep(0.2)


def _run_id(tmp_path: Path) -> str:
    with sqlite3.connect(tmp_path / "x.db") as db:
        return str(db.execute("select id from runs").fetchone()[0])


@pytest.mark.slow
def test_a_run_survives_ctrl_c_then_kill_minus_9_losing_nothing_and_repeating_nothing(
    tmp_path: Path,
) -> None:
    """One goal, three processes: Ctrl-C stops the run gracefully with everything
    recorded; resumed, it is killed with SIGKILL inside an evaluation; resumed again, it
    finishes without judging any candidate twice."""
    (tmp_path / "goal.toml").write_text(GOAL)
    process = _swarmfab(tmp_path, "run", "goal.toml")
    _wait_for_verdicts(tmp_path, 2, process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "swarmfab resume" in output and "Traceback" not in output
    with sqlite3.connect(tmp_path / "x.db") as db:
        status = db.execute("select status from runs").fetchone()[0]
    assert status == "interrupted"
    interrupted, _ = _verdicts(tmp_path)
    assert interrupted >= 2

    process = _swarmfab(tmp_path, "resume", _run_id(tmp_path), "--budget", "60s")
    _wait_for_verdicts(tmp_path, interrupted + 1, process)
    time.sleep(0.37)  # somewhere inside the next evaluation
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    before, _ = _verdicts(tmp_path)
    started = time.monotonic()
    resumed = _swarmfab(tmp_path, "resume", _run_id(tmp_path), "--budget", "30s",
                        "--max-evaluations", "3")
    output, _ = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, output
    assert time.monotonic() - started <= 30 + 15, output  # the budget and its stated grace
    after, distinct = _verdicts(tmp_path)
    assert after == distinct, "a candidate was evaluated twice"
    assert after >= before + 1, output
    shown = subprocess.run([sys.executable, "-m", "swarmfab", "show", "--json", "--db",
                            str(tmp_path / "x.db")], capture_output=True, text=True, check=True)
    summary = json.loads(shown.stdout)
    assert summary["status"] == "finished" and summary["verdicts"] == after
    assert summary["champion"] is not None
