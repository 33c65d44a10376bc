"""A headless Chromium for the report and dashboard tests (which read the session's
recorded run: ``recorded_run`` in tests/conftest.py).

Screenshots go to ``out/test-artifacts/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"


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
