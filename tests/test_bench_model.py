"""``scripts/bench_model.py`` on a tiny configuration: both phases timed with and without
the champion, the KDA share measured, and the patched model's logits agreeing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_model.py"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_bench_model_reports_both_phases_with_and_without_the_champion() -> None:
    pytest.importorskip("transformers")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--prefill", "64", "--decode-batch", "1",
         "--decode-tokens", "2", "--repeats", "1", "--json"],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert [row["phase"] for row in report["rows"]] == ["prefill T64", "decode B1 x2"]
    for row in report["rows"]:
        assert row["without"] > 0 and row["with"] > 0
        assert row["low"] <= row["speedup"] <= row["high"]
        assert 0 < row["share_after"] < 1 and 0 < row["share_before"] < 1
    # the champion's own counter: it ran in both phases (prefill and decode's steps)
    prefill, decode = (row["champion_calls"] for row in report["rows"])
    assert sum(prefill.values()) > 0 and sum(decode.values()) > 0, (prefill, decode)
    assert report["logits_max_abs_ratio"] < 1e-4
