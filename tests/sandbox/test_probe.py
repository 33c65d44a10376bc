"""`python -m swarmfab.sandbox.probe`: what each isolation step does on this host, and
whether CUDA works under it (a CUDA driver has needed things a step took away)."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from swarmfab.sandbox.probe import CHECKS, configurations


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
    if rows["read-only file systems"]["write outside"].startswith("refused"):  # as root
        assert sandbox["write outside"].startswith("refused")
        assert sandbox["shared memory"] == "ok"  # a tmpfs of its own
        assert rows["read-only file systems, /dev/shm too"]["shared memory"].startswith(
            "refused")
    if not torch.cuda.is_available():
        assert all(row["cuda"] == "refused: RuntimeError: no CUDA device"
                   and row["triton"] == "not tried: no CUDA" for row in rows.values())
