"""A time faster than the stored peak allows is judged again against the peak measured
now (swarm/hosts.py PeaksRecheck, evaluation/_impossible.py): a peak stored from a busy
host is low, and an honest kernel must not be rejected as impossible on it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.evaluation._impossible import (
    IMPOSSIBLE_MARK,
    impossible_reason,
    impossible_timing,
    rejudged,
)
from swarmfab.knowledge import Store
from swarmfab.measure.roofline import HostPeaks, host_fingerprint
from swarmfab.records import Candidate, Estimate, ShapeTiming, Status, Verdict
from swarmfab.workloads import Shape, get_workload

KDA = get_workload("kda")
SHAPE = Shape(1, 256, 2, 2, 64, 64)
CANDIDATE = Candidate("kda", "c", {"k.c": "/* a kernel */"}, "k.c")


def _timing(seconds: float, fraction: float | None) -> ShapeTiming:
    median = Estimate(seconds, seconds * 0.99, seconds * 1.01)
    return ShapeTiming(SHAPE.label, "torch-recurrent", median, median.scaled(10.0),
                       Estimate(0.1, 0.09, 0.11), "faster", 5, roofline_fraction=fraction)


def test_timings_judged_again_against_a_higher_peak() -> None:
    flops = KDA.flops(SHAPE)
    assert flops
    low = HostPeaks("host", flops / 1e-3, 1e9)  # the compute bound: 1 ms
    high = dataclasses.replace(low, flops_per_s=flops / 1e-5)  # 10 us
    timing = _timing(1e-4, fraction=1e-3 / 1e-4)  # 100 us: 10x past the low peak
    assert impossible_timing(KDA, [SHAPE], low, [timing]) is timing
    assert impossible_timing(KDA, [SHAPE], high, [timing]) is None
    rejected = Verdict(CANDIDATE.id, Status.REJECTED, impossible_reason(timing), (), (timing,))
    assert rejected.reason.endswith(IMPOSSIBLE_MARK)

    accepted = rejudged(CANDIDATE, rejected, KDA, [SHAPE], low, high)
    assert accepted.status is Status.ACCEPTED and accepted.reason.startswith("verified; 10.00x")
    # the fraction rested on the old compute bound: not known any more
    assert accepted.timings[0].roofline_fraction is None
    # still past the peak measured now: still rejected
    assert rejudged(CANDIDATE, rejected, KDA, [SHAPE], low, low) is rejected


GOAL = """workload = "kda"
budget = "300s"
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
def test_a_run_on_a_host_whose_stored_peak_is_far_too_low_measures_it_again(
        tmp_path: Path) -> None:
    """Peaks kept from a busy hour, a thousandth of this host's: the first candidate's
    time is beyond them, the peak is measured again, and the candidate is judged on it."""
    peaks_file = tmp_path / "host-peaks.json"
    peaks_file.write_text(json.dumps({host_fingerprint(1): {
        "flops_per_s": 1e8, "bytes_per_s": 1e8}}))
    (tmp_path / "goal.toml").write_text(GOAL)
    done = subprocess.run(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--db", str(tmp_path / "x.db"),
         "--workdir", str(tmp_path / "work")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "SWARMFAB_HOST_PEAKS": str(peaks_file),
             "COLUMNS": "200"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "peaks measured again, 0 ->" in output, output
    store = Store(tmp_path / "x.db")
    verdicts = [verdict for _, verdict in store.verdicts(store.run("latest").id)]
    assert verdicts and not any(IMPOSSIBLE_MARK in v.reason for v in verdicts), [
        v.reason for v in verdicts]
    assert any(v.status is Status.ACCEPTED for v in verdicts)
    raised = store.host_peaks(host_fingerprint(1))
    assert raised is not None and raised.flops_per_s > 1e9
