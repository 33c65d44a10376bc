"""A store holding one short, real KDA run (one for the session, all of its workers), and
a headless Chromium.

The run is the real thing (`python -m swarmfab run`), kept short: two small shapes, one
thread, ten evaluations (``--max-evaluations`` ends it; the budget is generous, so a busy
host still records them all). Report, dashboard and export tests read copies of it.
Screenshots go to ``out/test-artifacts/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swarmfab.knowledge import Store

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"

GOAL = """
workload = "kda"
budget = "300s"  # not what ends the run: --max-evaluations 10 does
threads = 1
shapes = [{B = 1, T = 128, H = 2, K = 32, V = 32}, {B = 2, T = 32, H = 2, K = 16, V = 16}]
"""


@dataclass(frozen=True)
class RecordedRun:
    db: Path
    run_id: str
    champion_id: str

    def copy_store(self, directory: Path) -> Path:
        """A private copy of the store, for tests that write to it."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / "copy.db"
        with sqlite3.connect(self.db) as source, sqlite3.connect(target) as copy:
            source.backup(copy)  # consistent with the WAL, unlike a file copy
        return target


@pytest.fixture(scope="session")
def recorded_run(session_root: Path) -> RecordedRun:
    """Made once for the session: the first worker to need it runs it, holding a lock
    the others wait on, and leaves what it recorded for them."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the run's candidates")
    home = session_root / "recorded-run"
    with open(session_root / "recorded-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "recorded.json").exists():
            _record_run(home)
    recorded = json.loads((home / "recorded.json").read_text())
    return RecordedRun(home / "store.db", recorded["run"], recorded["champion"])


def _record_run(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)  # another worker's attempt that failed
    home.mkdir()
    (home / "goal.toml").write_text(GOAL)
    db = home / "store.db"
    done = subprocess.run(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--db", str(db),
         "--workdir", str(home / "work"), "--max-evaluations", "10"],
        # past the budget (and the setup and closing table beside it): on a busy host the
        # budget ends the run, never this timeout
        cwd=home, capture_output=True, text=True, timeout=480, check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    # kept: the run's own timeline says where a slow session's minutes went
    (home / "run.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Store(db).run("latest")
    assert run.champion_id is not None, done.stdout
    (home / "recorded.json").write_text(json.dumps({"run": run.id,
                                                    "champion": run.champion_id}))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright; skipped (with the reason) when absent. One
    per module: Playwright's synchronous API keeps an event loop running on this thread
    until it stops, and a later test's ``asyncio.run`` (the engine's) would refuse to
    start beside it."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is missing: pip install -e '.[dev]'")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                              args=["--headless", "--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records every request that failed or left the machine."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    opened.failed_requests = []  # type: ignore[attr-defined]

    def failed(request: Any) -> None:
        # a poll still in flight when the page navigates is aborted by the browser, not
        # refused by the server: that is no failure of the page
        if request.failure != "net::ERR_ABORTED":
            opened.failed_requests.append(request.url)  # type: ignore[attr-defined]

    opened.on("requestfailed", failed)
    yield opened
    context.close()


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    return save_screenshot


@pytest.fixture
def charts_drew() -> Callable[[Any, dict[str, str]], None]:
    return assert_charts_drew


def save_screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def assert_charts_drew(page: Any, expected: dict[str, str]) -> None:
    """Every chart section holds a visible SVG with real marks and its title as text."""
    for key, title in expected.items():
        svg = page.locator(f"#chart-{key} svg")
        assert svg.count() == 1, f"chart {key} missing"
        box = svg.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100, (key, box)
        marks = svg.locator("path, use, rect").count()
        assert marks > 10, f"chart {key} has only {marks} marks"
        assert title in svg.locator("text").all_text_contents(), (key, title)
