"""`swarmfab suite` with an LLM agent against the scripted server: a problem file's
ModelNew edited, judged wrong, sent back for repair, repaired, accepted and crowned (the
problem's eager Model loops over rows in Python; the repair is one vectorised line),
then exported as a plain file with its evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Reply

from swarmfab.knowledge import Store
from swarmfab.records import Status as Verdicts

pytestmark = pytest.mark.slow

PROBLEM = '''"""Swish, scaled, row by row: an elementwise chain written slowly."""
import torch
import torch.nn as nn

rows = 16  # a loop of 16 rows: torch.compile's baseline traces every one of them
cols = 1024


class Model(nn.Module):
    def forward(self, x):
        return torch.stack([row * torch.sigmoid(row) * 1.5 for row in x])


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''
GOAL = """
# max_evaluations ends the run; the budget leaves room for the setup, whose torch.compile
# baseline takes minutes on a loaded host (and the closing table reserves as much again)
budget = "600s"
threads = 1
workers = 1
max_evaluations = 2
agents = ["llm"]

[llm]
roles = ["fusion"]
repair_turns = 1
timeout = "5s"
max_retries = 0
"""
COMPILED = "fast = torch.compile(super().forward, dynamic=None, options={'freezing': True})"
WRONG = ("RATIONALE: skip the scale\n<<<<<<< SEARCH\n" + COMPILED + "\n=======\n"
         "fast = torch.sigmoid\n>>>>>>> REPLACE\n")
REPAIRED = ("RATIONALE: every row at once\n<<<<<<< SEARCH\nfast = torch.sigmoid\n=======\n"
            "fast = lambda x: x * torch.sigmoid(x) * 1.5\n>>>>>>> REPLACE\n")


def test_the_suite_repairs_an_llm_edit_of_a_model_new(tmp_path: Path) -> None:
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "swish.py").write_text(PROBLEM)
    (tmp_path / "goal.toml").write_text(GOAL)
    env = {**os.environ, "FAKE_LLM_ACCESS": "k", "COLUMNS": "160"}
    with FakeLLM([Reply(WRONG), Reply(REPAIRED)], default=Reply("")) as llm:
        done = subprocess.run(
            [sys.executable, "-m", "swarmfab", "suite", "problems", "--goal", "goal.toml",
             "--llm-base-url", llm.base_url, "--llm-model", "fake-coder",
             "--llm-api-key-env", "FAKE_LLM_ACCESS", "--sizes", "as-is", "--json",
             "--db", "x.db", "--workdir", "work"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
        prompts = [request.prompt for request in llm.requests]
    assert done.returncode == 0, done.stdout + done.stderr
    card = json.loads(done.stdout)
    assert card["problems"][0]["status"] != "error", done.stderr
    assert card["total"] == 1 and card["problems"][0]["problem"] == "swish"
    assert prompts, done.stderr  # the LLM agent was asked
    assert "class ModelNew(Model)" in prompts[0]
    store = Store(tmp_path / "x.db")
    run = store.run(None)
    verdicts = [verdict.status for _, verdict in store.verdicts(run.id)]
    assert verdicts == [Verdicts.REJECTED, Verdicts.ACCEPTED]
    repairs = [json.loads(detail) for _, detail in store.events(run.id, "llm-repair")]
    assert [r["status"] for r in repairs] == ["rejected"]
    assert "Repair turn" in prompts[1] and "out matches reference" in prompts[1]
    score = card["problems"][0]
    assert score["status"] == "champion" and score["over_eager"][1] > 1.0  # CI above 1
    assert card["fast_1"] == 1.0 and card["verified"] == 1
    exported = subprocess.run(
        [sys.executable, "-m", "swarmfab", "export", "--out", "answer", "--db", "x.db"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    answer = (tmp_path / "answer" / "model_new.py").read_text()
    assert "x * torch.sigmoid(x) * 1.5" in answer and "class Model(nn.Module)" in answer
    assert json.loads((tmp_path / "answer" / "provenance.json").read_text())["backend"] == (
        "torch-module")
