"""scripts/gpu_check.py's watchdog and summary, on any host: a phase that hangs names the
line it hung on and leaves no process behind; a host without a GPU is told so."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "gpu_check.py"
# a parent that waits on a child in a session of its own (as swarmfab waits on its jobs)
HANGS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.1)"],
                         start_new_session=True)
print("child", child.pid, flush=True)
def wait_for_the_job():
    time.sleep(600)
wait_for_the_job()
"""


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass reads its own module
    spec.loader.exec_module(module)
    return module


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_hanging_phase_prints_its_stacks_and_leaves_nothing_running(
        tmp_path: Path, gpu_check: ModuleType) -> None:
    started = time.monotonic()
    phase = gpu_check.run_phase("hangs", [[sys.executable, "-c", HANGS]], 3.0, tmp_path)
    assert time.monotonic() - started < 3.0 + gpu_check.DUMP_GRACE_S + 5
    assert phase.status == "timed out" and not phase.passed
    log = (tmp_path / "hangs.log").read_text()
    assert "line 7 in wait_for_the_job" in log  # the line it hung on (time.sleep(600))
    child = int(log.split("child ")[1].split()[0])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the phase's job outlived the watchdog"


def test_phases_run_in_turn_and_a_failure_ends_the_phase(
        tmp_path: Path, gpu_check: ModuleType) -> None:
    ok = [sys.executable, "-c", "print('first')"]
    fails = [sys.executable, "-c", "import sys; sys.exit(3)"]
    never = [sys.executable, "-c", "print('never')"]
    phase = gpu_check.run_phase("fails", [ok, fails, never], 60.0, tmp_path)
    assert phase.status == "failed" and phase.returncode == 3
    assert "first" in phase.log and "never" not in phase.log


def test_without_a_gpu_the_check_says_so_in_its_summary(tmp_path: Path) -> None:
    if any(Path(p, "nvidia-smi").exists() for p in os.environ.get("PATH", "").split(":")):
        pytest.skip("this host has nvidia-smi")
    import subprocess

    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "no NVIDIA GPU" in done.stderr
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not summary["passed"] and summary["phases"][0]["name"] == "environment"


def test_a_phase_gets_what_is_left_of_the_checks_limit(gpu_check: ModuleType) -> None:
    now = time.monotonic()
    assert gpu_check.phase_limit(90.0, 300.0, now) == 90.0
    assert gpu_check.phase_limit(90.0, 300.0, now - 250.0) == pytest.approx(50.0, abs=1.0)
    assert gpu_check.phase_limit(90.0, 300.0, now - 295.0) is None  # under MIN_PHASE_S
