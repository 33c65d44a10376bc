"""`python -m swarmfab.sandbox.probe`: what each isolation step does on this host, and
whether CUDA works under it (a CUDA driver has needed things a step took away)."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from swarmfab.sandbox.probe import CHECKS, configurations, mount_points


def test_the_probe_reports_every_step_and_the_sandbox_as_a_job_gets_it() -> None:
    done = subprocess.run([sys.executable, "-m", "swarmfab.sandbox.probe", "--json"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["configuration"]: row for row in json.loads(done.stdout)["configurations"]}
    assert list(rows) == list(configurations())
    assert all(set(CHECKS) <= set(row) for row in rows.values()), rows
    free, sandbox = rows["no isolation"], rows["sandbox"]
    assert all(free[check] == "ok" for check in ("write outside", "network", "processes"))
    assert sandbox["network"].startswith("refused") and sandbox["processes"].startswith("refused")
    assert rows["sandbox, processes allowed"]["processes"] == "ok"
    cuda_job = rows["sandbox, a CUDA job"]
    assert cuda_job["network"].startswith("refused") and cuda_job["processes"].startswith(
        "refused")
    if rows["read-only file systems"]["write outside"].startswith("refused"):  # as root
        assert sandbox["write outside"].startswith("refused")
        assert sandbox["shared memory"] == "ok"  # a tmpfs of its own
        assert cuda_job["write outside"].startswith("refused")
        assert rows["read-only file systems, /dev/shm too"]["shared memory"].startswith(
            "refused")
    if not torch.cuda.is_available():
        assert all(row["cuda"] == "refused: RuntimeError: no CUDA device"
                   and row["triton"] == "not tried: no CUDA" for row in rows.values())


def test_the_mount_search_stops_where_cuda_does_not_work_at_all() -> None:
    """``--mounts`` narrows a read-only file system that stops CUDA down to its mount;
    where CUDA does not work without isolation either, there is nothing to narrow."""
    done = subprocess.run([sys.executable, "-m", "swarmfab.sandbox.probe", "--mounts",
                           "--json"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [row["configuration"] for row in json.loads(done.stdout)["configurations"]]
    if torch.cuda.is_available():
        assert rows[:2] == ["no isolation", "a private mount namespace, nothing read-only"]
        assert rows[-1].startswith("read-only file systems, ")
        assert {f"read-only {point} alone" for point in mount_points()} <= set(rows)
    else:
        assert rows == ["no isolation"]


def test_mount_points_are_read_from_mountinfo() -> None:
    points = mount_points()
    assert "/" in points and "/proc" in points and len(points) == len(set(points))
