"""scripts/bench_ceiling.py: the recurrence's sweeps beside the host's multiply-add loop,
built from the kernel's own source with its flags, on any host with gcc."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.kernels._host import full_width_isa

SCRIPT = Path(__file__).parents[2] / "scripts" / "bench_ceiling.py"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_ceiling_times_the_kernels_sweeps_beside_the_fma_loop() -> None:
    # five rounds: a round whose loop the other tests' load interrupts reads the sweeps
    # far past the loop (1.45 once), and the median must stand on undisturbed ones
    done = subprocess.run([sys.executable, str(SCRIPT), "--blocks", "20", "--rounds", "5",
                           "--json"], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(done.stdout)
    assert result["isa"] == (full_width_isa() or "native")
    loop, sweeps, prepared = (result[name] for name in ("fma-loop", "sweeps", "sweeps+prepare"))
    assert loop["of_loop_median"] == 1.0 and loop["gflops_median"] > 0
    # the sweeps are multiply-adds at the loop's width: never much past it, never idle
    assert 0.05 < sweeps["of_loop_median"] < 1.2
    # preparing each block is more work for the same FLOP count
    assert prepared["gflops_median"] < 1.05 * sweeps["gflops_median"]
    low, high = sweeps["of_loop_range"]
    assert low <= sweeps["of_loop_median"] <= high


def test_knobs_outside_the_space_are_refused() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--knobs", '{"tile_v": 7}'],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "knob tile_v: 7 not in" in done.stderr
    assert "Traceback" not in done.stderr
