"""Live progress: the tracker's picture of a run and its rendering."""

from __future__ import annotations

from rich.console import Console

from swarmfab.records import Estimate, ShapeTiming, Status, Verdict
from swarmfab.report.progress import LiveProgress, render_status
from swarmfab.swarm.status import StatusTracker


def _faster(speedup: float, roofline: float) -> Verdict:
    ratio = Estimate(1 / speedup, 1 / (speedup * 1.1), 1 / (speedup * 0.9))
    timing = ShapeTiming("B1 T8", "baseline", Estimate(1, 1, 1), Estimate(1, 1, 1), ratio,
                         "faster", 10, roofline)
    return Verdict("c" * 16, Status.ACCEPTED, "verified", timings=(timing,))


def test_the_champion_speedup_over_the_baselines_compounds_across_crownings() -> None:
    tracker = StatusTracker(budget_s=60)
    tracker.evaluated("tiling", "a" * 16, _faster(2.0, 0.3), promoted=True)
    tracker.evaluated("compiler", "b" * 16, _faster(1.5, 0.45), promoted=True)
    status = tracker.snapshot()
    ((shape, median, low, high, roofline),) = status.champion_shapes
    assert shape == "B1 T8" and abs(median - 3.0) < 1e-9 and low < median < high
    assert roofline == 0.45 and status.champion == "b" * 16


def test_rejections_are_counted_by_reason_and_activity_is_per_agent() -> None:
    tracker = StatusTracker(budget_s=60)
    for _ in range(2):
        tracker.evaluated("tiling", "a" * 16, Verdict("a" * 16, Status.BUILD_FAILED,
                                                      "compilation failed: x.c:1: error"), False)
    tracker.evaluated("compiler", "b" * 16, Verdict("b" * 16, Status.TIMED_OUT,
                                                    "verification: no answer"), False)
    status = tracker.snapshot()
    assert status.counts == {"build_failed": 2, "timed_out": 1}
    assert status.top_reasons[0] == ("compilation failed", 2)
    assert status.activity == {"tiling": "aaaaaaaaaa: build_failed",
                               "compiler": "bbbbbbbbbb: timed_out"}
    assert status.evaluations == 3 and status.per_minute > 0


def test_the_live_panel_shows_status_and_recent_lines() -> None:
    console = Console(record=True, width=120, force_terminal=True)
    tracker = StatusTracker(budget_s=60)
    tracker.run_id, tracker.phase = "r1", "searching"
    tracker.evaluated("tiling", "a" * 16, _faster(2.0, 0.3), promoted=True)
    with LiveProgress(console) as live:
        live.log("[  1] tiling accepted")
        live.update(tracker.snapshot())
    text = console.export_text()
    assert "run r1: searching" in text and "[  1] tiling accepted" in text
    assert "2.00x" in text and "30% of roofline" in text
    rendered = Console(record=True, width=120)
    rendered.print(render_status(tracker.snapshot()))
    assert "none yet" not in rendered.export_text()
