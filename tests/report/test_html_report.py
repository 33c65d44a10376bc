"""`swarmfab report --out FILE`: one self-contained HTML file, checked in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.knowledge import Store
from swarmfab.report.html import render_standalone
from swarmfab.report.run_view import load_run_view

CHART_TITLES = {
    "progress": "Best speed over time",
    "shapes": "Champion speedup per shape (95% CI)",
    "roofline": "Roofline: every accepted candidate",
    "rejections": "Rejections by reason",
    "corpus": "Validation corpus growth",
}


def _report(recorded_run: Any, tmp_path: Path, *run: str) -> Path:
    out = tmp_path / "nested" / "report.html"
    result = CliRunner().invoke(app, ["report", *run, "--db", str(recorded_run.db),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output
    return out


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_the_report_is_one_file_that_needs_no_network(recorded_run: Any,
                                                      tmp_path: Path) -> None:
    html = _report(recorded_run, tmp_path, "latest").read_text()
    assert recorded_run.run_id in html and recorded_run.champion_id in html
    assert "<script" not in html and "<link" not in html and "<img" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", html)
    assert "url(http" not in html and "@import" not in html
    assert html.count("<svg") == len(CHART_TITLES)


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_the_report_draws_every_chart_in_chromium(recorded_run: Any, tmp_path: Path,
                                                  page: Any, charts_drew: Any,
                                                  screenshot: Any) -> None:
    report = _report(recorded_run, tmp_path)
    page.goto(report.as_uri())
    charts_drew(page, CHART_TITLES)
    assert page.failed_requests == []
    lineage = page.locator("#lineage tr")
    assert lineage.count() >= 2  # a header and at least the champion
    assert recorded_run.champion_id[:10] in lineage.last.inner_text()
    assert "none recorded" in page.locator("#lessons").inner_text()
    final = page.locator("#final").inner_text()
    assert "fastest baseline" in final and "champion" in final
    machine = page.locator("#machine").inner_text()
    assert "GFLOP/s" in machine and "compiler" in machine
    screenshot(page, "report.png")


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_an_unwritable_report_path_is_a_clear_error(recorded_run: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["report", "--db", str(recorded_run.db),
                                      "--out", str(blocker / "report.html")])
    assert result.exit_code == 1
    assert "cannot write the report" in result.output
    assert "Traceback" not in result.output


def test_a_run_without_verdicts_renders_with_empty_charts(tmp_path: Path) -> None:
    store = Store(tmp_path / "fresh.db")
    goal = {"workload": "kda", "shapes": [{"B": 1, "T": 8, "H": 1, "K": 4, "V": 4}],
            "budget_s": 10.0, "threads": 1}
    run_id = store.start_run("kda", goal, {"isa": "x86_64", "threads": 1})
    html = render_standalone(load_run_view(store, run_id), store.url)
    assert "no verified candidate yet" in html
    assert "no champion" in html.lower()
    assert "none recorded" in html
    assert html.count("<svg") == len(CHART_TITLES)
    assert "Not measured for this workload" in html

    # the workload's mutation adequacy, once `swarmfab corpus adequacy` has measured it
    score = {"mutants": 12, "equivalent": 2, "non_equivalent": 10, "killed_fast": 7,
             "killed_grown": 9, "killed_battery": 10}
    store.save_measurement("adequacy kda", {"started": "2026-12-06T05:05:59+00:00",
                                            "scores": {"scoring": {"sign-flip": score,
                                                                   "all": score}}})
    html = render_standalone(load_run_view(store, run_id), store.url)
    section = html[html.index('id="adequacy"'):html.index('id="lessons"')]
    assert "2026-12-06T05:05" in section and "sign-flip" in section
    assert "7/10 (70%)" in section and "9/10 (90%)" in section and "10/10 (100%)" in section


@pytest.mark.slow  # over the recorded run: a real `swarmfab run`
def test_every_command_that_takes_a_run_accepts_latest(recorded_run: Any) -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["show", "latest", "--json", "--db", str(recorded_run.db)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["run"] == recorded_run.run_id
    reported = runner.invoke(app, ["report", "latest", "--json", "--db", str(recorded_run.db)])
    assert json.loads(reported.output)["champion"] == recorded_run.champion_id
    assert Store(recorded_run.db).run("latest").id == recorded_run.run_id
