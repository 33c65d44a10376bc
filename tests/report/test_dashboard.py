"""`swarmfab dashboard`: a real uvicorn server on loopback, pages checked in Chromium."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from swarmfab.knowledge import Store
from swarmfab.report.dashboard import create_app

CHART_TITLES = {
    "progress": "Best speed over time",
    "shapes": "Champion speedup per shape (95% CI)",
    "roofline": "Roofline: every accepted candidate",
}


class Served:
    def __init__(self, store: Store, db: Path, url: str):
        self.store, self.db, self.url = store, db, url


@pytest.fixture
def served(recorded_run: Any, tmp_path: Path) -> Iterator[Served]:
    """The dashboard over a private copy of the recorded store, polling every 200 ms."""
    db = recorded_run.copy_store(tmp_path)
    store = Store(db)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(store, poll_ms=200), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.05)
    yield Served(store, db, f"http://127.0.0.1:{port}")
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_the_runs_list_and_a_run_page_draw_their_charts(
    served: Served, recorded_run: Any, page: Any, charts_drew: Any, screenshot: Any,
) -> None:
    page.goto(served.url + "/")
    row = page.locator("#run-rows tr").first
    assert recorded_run.run_id in row.inner_text()
    assert "finished" in row.inner_text()
    row.locator("a").click()
    page.wait_for_url(f"**/runs/{recorded_run.run_id}")
    charts_drew(page, CHART_TITLES)
    assert recorded_run.champion_id[:10] in page.locator("#lineage").inner_text()
    page.wait_for_function("document.getElementById('updated').textContent.includes('updated')")
    assert page.failed_requests == []
    screenshot(page, "dashboard-run.png")


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_a_run_page_follows_a_live_run(served: Served, recorded_run: Any, page: Any,
                                       screenshot: Any) -> None:
    """Verdicts recorded by another writer show up without a reload."""
    store = served.store
    finished = store.run(recorded_run.run_id)
    live = store.start_run(finished.workload, finished.goal, finished.host)
    page.goto(served.url + "/runs/latest")
    assert live in page.locator("#overview").inner_text()
    assert "running" in page.locator("#overview .status").inner_text()
    assert "none" in page.locator("#overview").inner_text()  # no champion yet

    champion = store.candidate(recorded_run.champion_id)
    verdict = next(v for row, v in store.verdicts(recorded_run.run_id)
                   if row.candidate_id == champion.id)
    store.record(live, champion, verdict)
    store.set_champion(live, champion.id)
    store.record_event(live, "champion-changed", f"{champion.id} by {champion.agent}")
    page.wait_for_function(
        f"document.querySelector('#overview').innerText.includes('{champion.id}')",
        timeout=10_000)
    assert "1 accepted" in page.locator("#overview").inner_text()
    assert page.locator("#chart-progress svg").count() == 1
    store.finish_run(live, "finished", None)
    page.wait_for_function(
        "document.querySelector('#overview .status').innerText.includes('finished')",
        timeout=10_000)
    screenshot(page, "dashboard-live.png")

    page.goto(served.url + "/")
    assert page.locator("#run-rows tr").count() == 2


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_unknown_runs_answer_404_with_the_reason(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as client:
        page = client.get("/runs/20990101-000000-abcdef")
        assert page.status_code == 404
        assert "no run '20990101-000000-abcdef'" in page.text
        state = client.get("/runs/nope/state")
        assert state.status_code == 404 and "nope" in state.json()["error"]
        listed = client.get("/api/runs").json()
        assert [r["status"] for r in listed] == ["finished"]


def test_the_dashboard_binds_to_loopback_by_default() -> None:
    import inspect

    from swarmfab import cli
    from swarmfab.report import dashboard

    assert inspect.signature(dashboard.serve).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(cli.dashboard).parameters["host"].default == "127.0.0.1"
