"""The same runs on a real local Ray cluster: a head and a second node, each on its own core.

The cluster is started with `ray start` (the nodes pinned with `taskset`, so an evaluator
actor's core leases cover exactly its node's core) and stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = [
    pytest.mark.slow,
    # alone, after the parallel suite (see the Makefile): `ray stop --force` ends every
    # cluster on the machine, and a node pinned to a core that other tests keep busy
    # misses heartbeats and is declared dead
    pytest.mark.exclusive,
    # a real cluster of two nodes, minutes of it: make test-integration runs it
    pytest.mark.integration,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores"),
    pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

RAY = str(Path(sys.executable).parent / "ray")
GOAL = """workload = "kda"
threads = 1
seed = 5
[[shapes]]
B = 1
T = 64
H = 2
K = 16
V = 16
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# in the environment of the second node's processes (its raylet's, inherited by every
# worker it starts): the processes to kill, and no other test's
SECOND_NODE = f"SWARMFAB_TEST_RAY_NODE={os.getpid()}"


def _ray(*args: str, core: int | None = None, env: dict[str, str] | None = None) -> str:
    command = [RAY, *args] if core is None else ["taskset", "-c", str(core), RAY, *args]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120,
                          env=env).stdout


def _wait_for_cpus(address: str, cpus: int) -> None:
    """Until the cluster counts ``cpus`` CPUs: a node that `ray start` has launched may
    join a few seconds later, and a run started before would see one node."""
    deadline = time.monotonic() + 60
    while True:
        status = _ray("status", f"--address={address}")
        total = re.search(r"/(\d+(?:\.\d+)?) CPU", status)
        if total and float(total.group(1)) >= cpus:
            return
        assert time.monotonic() < deadline, f"the cluster has not {cpus} CPUs:\n{status}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A two-node Ray cluster on this machine: the head on core 0, a node on core 1."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    address = f"127.0.0.1:{_free_port()}"
    _ray("start", "--head", f"--port={address.split(':')[1]}", "--num-cpus=1",
         "--include-dashboard=false", "--disable-usage-stats", core=cores[0])
    try:
        name, value = SECOND_NODE.split("=")
        _ray("start", f"--address={address}", "--num-cpus=1", core=cores[1], env={name: value})
        _wait_for_cpus(address, 2)
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120)


def _swarmfab(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`swarmfab run` in the background, its output in tmp_path/out.log (no pipe to fill).
    The tests give a generous budget and let --max-evaluations end the run."""
    (tmp_path / "goal.toml").write_text(GOAL)
    return subprocess.Popen(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--db", str(tmp_path / "x.db"),
         "--workdir", str(tmp_path / "work"), *args],
        cwd=tmp_path, stdout=(tmp_path / "out.log").open("w"), stderr=subprocess.STDOUT,
        text=True)


def _finish(process: subprocess.Popen[str], tmp_path: Path) -> str:
    process.wait(timeout=300)
    return (tmp_path / "out.log").read_text()


def _verdicts(db: Path) -> tuple[int, int]:
    try:
        with sqlite3.connect(db) as connection:
            row = connection.execute("select count(*), count(distinct candidate_id) "
                                     "from verdicts").fetchone()
    except sqlite3.OperationalError:
        return 0, 0
    return int(row[0]), int(row[1])


def _show(tmp_path: Path) -> dict[str, object]:
    shown = subprocess.run([sys.executable, "-m", "swarmfab", "show", "--json", "--db",
                            str(tmp_path / "x.db")], capture_output=True, text=True, check=True)
    return dict(json.loads(shown.stdout))


def test_a_run_completes_on_two_ray_nodes(cluster: str, tmp_path: Path) -> None:
    process = _swarmfab(tmp_path, "--executor", "ray", "--address", cluster, "--budget", "300s",
                        "--max-evaluations", "6")
    output = _finish(process, tmp_path)
    assert process.returncode == 0, output
    assert "2 Ray evaluator(s) on 2 node(s)" in output
    # the driver's cores sit idle while the actors work: not the platform's overhead
    assert "platform overhead" not in output
    total, distinct = _verdicts(tmp_path / "x.db")
    assert total == distinct == 6
    shown = _show(tmp_path)
    assert shown["status"] == "finished" and shown["champion"] is not None


def _second_node_processes() -> list[int]:
    """The second node's raylet and workers: the processes with its mark."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if SECOND_NODE.encode() in environ:
            found.append(int(entry.name))
    return found


def test_a_node_killed_mid_run_loses_no_verdict(cluster: str, tmp_path: Path) -> None:
    process = _swarmfab(tmp_path, "--executor", "ray", "--address", cluster, "--budget", "300s",
                        "--max-evaluations", "8")
    deadline = time.monotonic() + 180
    while _verdicts(tmp_path / "x.db")[0] < 2:
        assert process.poll() is None, (tmp_path / "out.log").read_text()
        assert time.monotonic() < deadline, "too few verdicts before the kill"
        time.sleep(0.2)
    victims = _second_node_processes()
    assert victims, "found no process of the second node"
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    killed_at = _verdicts(tmp_path / "x.db")[0]
    output = _finish(process, tmp_path)
    assert process.returncode == 0, output
    total, distinct = _verdicts(tmp_path / "x.db")
    assert total == distinct and total >= killed_at
    assert total == 8, output
    assert _show(tmp_path)["status"] == "finished"
