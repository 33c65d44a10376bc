"""`swarmfab corpus adequacy` end to end on a tiny problem file: the honest kernels are
kept, mutants are judged by both tiers, the scores come out per class and are stored
(the JSON file under the workdir, the store's measurement) and a rerun is answered from
the verdict cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.evaluation.adequacy import Adequacy, MutantRecord, TierVerdict
from swarmfab.knowledge import Store
from swarmfab.report.adequacy import adequacy_line, measurement_key

TINY = '''"""A temperature softmax over short rows."""
import torch
import torch.nn as nn

batch_size = 16
vocab_size = 64


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        return torch.softmax(logits / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, vocab_size)]


def get_init_inputs():
    return [0.5]
'''


@pytest.mark.slow
def test_corpus_adequacy_on_a_tiny_problem(tmp_path: Path) -> None:
    problem = tmp_path / "tiny_softmax.py"
    problem.write_text(TINY)
    db = tmp_path / "x.db"
    args = ["corpus", "adequacy", str(problem), "--max-per-class", "1",
            "--operator", "missing-max", "--operator", "lazy-result",
            "--db", str(db), "--workdir", str(tmp_path / "work"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{"):])
    assert len(summary["subjects"]) == 2 and not summary["left_out"]
    judged = {name: score for name, score in summary["scores"]["scoring"].items()
              if name != "all"}
    assert set(judged) <= {"missing-max", "lazy-result"}
    total = summary["scores"]["scoring"]["all"]
    growth = summary["scores"]["growth"]["all"]
    assert total["mutants"] + growth["mutants"] >= 2
    # a lazy result is caught by both tiers; softmax without its maximum by the battery
    for score in (total, growth):
        assert score["killed_battery"] == score["non_equivalent"]
    written = json.loads((tmp_path / "work" / "adequacy" / "tiny_softmax.json").read_text())
    assert written["mutants"] and all(m["half"] in ("growth", "scoring")
                                      for m in written["mutants"])
    assert Store(db).measurement("adequacy tiny_softmax") is not None
    # a rerun meets every verdict in the cache: the same figures
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rerun = json.loads(again.stdout[again.stdout.index("{"):])
    assert rerun["scores"] == summary["scores"]


def _record(number: int, half: str, **verdicts: bool) -> MutantRecord:
    record = MutantRecord(f"m{number}", "C chunked", "loop-bound", "< -> <=", "line 1", half,
                          outcome="judged")
    record.fast = TierVerdict(verdicts.get("fast", False))
    record.battery = TierVerdict(verdicts.get("battery", False))
    record.grown = TierVerdict(verdicts.get("grown", False))
    if not (verdicts.get("fast") or verdicts.get("grown") or verdicts.get("battery")):
        record.beyond = TierVerdict(verdicts.get("beyond", False), case="beyond: T65")
        record.equivalent = "" if record.beyond.killed else "never reached"
    return record


def test_scores_count_the_scoring_half_and_report_shows_them(tmp_path: Path) -> None:
    result = Adequacy("kda", seed=0, max_per_class=4, started="2026-01-01T00:00:00+00:00")
    result.records = [
        _record(1, "scoring", fast=True, battery=True),
        _record(2, "scoring", battery=True, grown=True),
        _record(3, "scoring", battery=True),
        _record(4, "scoring"),  # equivalent: survives everything
        _record(5, "scoring", beyond=True),  # a battery miss
        _record(6, "growth", battery=True),
        MutantRecord("m7", "C chunked", "loop-bound", "r", "line 2", "scoring",
                     outcome="no build"),
    ]
    score = result.scores()["loop-bound"]
    assert (score.mutants, score.equivalent, score.non_equivalent) == (5, 1, 4)
    assert (score.killed_fast, score.killed_grown, score.killed_battery) == (1, 2, 3)
    assert (score.battery_misses, score.no_build) == (1, 1)
    assert result.scores("growth")["all"].killed_battery == 1
    summary = result.summary()
    assert [e["id"] for e in summary["equivalent"]] == ["m4"]
    assert [e["killed_beyond_by"] for e in summary["battery_misses"]] == ["beyond: T65"]
    assert "battery 3/4 (75%)" in adequacy_line(summary)
    store = Store(tmp_path / "x.db")
    run = store.start_run("kda", {}, {})
    store.save_measurement(measurement_key("kda"), summary)
    shown = CliRunner().invoke(app, ["report", run, "--db", str(tmp_path / "x.db")])
    assert shown.exit_code == 0, shown.output
    assert "fast corpus after growth 2/4 (50%)" in " ".join(shown.output.split())
