"""`swarmfab run` with LLM agents against the scripted server: the command as users run it.

Two short runs. With ``--agents llm,builtin``: a rate limit, then a correct edit that
becomes champion through the normal gate, a reviewer's opinion, then a hostile edit
the verifier rejects. With ``--agents llm`` alone: a hanging server, a malformed reply
and an empty one, an edit that does not compile and one that cheats (both sent back for
repair, then abandoned), and finally a correct edit. Both runs end normally and record
what happened; the API key is nowhere in the store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Hang, Raw, Reply, Status

from swarmfab.kernels import delta as delta_kernels
from swarmfab.knowledge import Store
from swarmfab.records import Status as Verdicts
from swarmfab.workloads import design_space

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("gcc") is None,
                                                   reason="needs gcc")]

# max_evaluations ends each run; its budget is generous so a busy host still gets there
GOAL = """
workload = "kda"
budget = "{budget}"
threads = 1
workers = 1  # one evaluation at a time: which candidate is crowned first is then fixed
max_evaluations = {evaluations}
shapes = [{{B = 1, T = 64, H = 2, K = 16, V = 16}}]

[llm]
roles = ["vectorisation"]
repair_turns = {repairs}
timeout = "2s"
max_retries = {retries}
price_input = 2.0
price_output = 8.0
budget_usd = 5.0
"""
KEY = "fake-llm-secret-4242"
HOSTILE = (Path(__file__).parents[1] / "redteam" / "candidates" / "c_memo_by_pointer.c")
# a correct edit of the design space's starting point (the chunked template)
GOOD_EDIT = ("RATIONALE: unroll the micro-kernel twice\n<<<<<<< SEARCH\n"
             "#define CH_RB 4\n#define CH_UNROLL 1\n=======\n"
             "#define CH_RB 4\n#define CH_UNROLL 2\n>>>>>>> REPLACE\n")
HOSTILE_REPLY = f"RATIONALE: reuse the last result\n```c\n{HOSTILE.read_text()}```\n"
NO_COMPILE = ("RATIONALE: wider vectors\n<<<<<<< SEARCH\n/* knobs chosen by swarmfab */\n"
              "=======\nstatic int oops = not_declared;\n>>>>>>> REPLACE\n")


def run_swarmfab(tmp_path: Path, llm: FakeLLM, agents: str, goal: str) -> str:
    (tmp_path / "goal.toml").write_text(goal)
    env = {**os.environ, "FAKE_LLM_ACCESS": KEY, "COLUMNS": "160"}
    done = subprocess.run(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--agents", agents,
         "--llm-base-url", llm.base_url, "--llm-model", "fake-coder",
         "--llm-api-key-env", "FAKE_LLM_ACCESS", "--db", "x.db", "--workdir", "work"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output
    assert KEY.encode() not in (tmp_path / "x.db").read_bytes()
    assert all(request.headers["authorization"] == f"Bearer {KEY}"
               for request in llm.requests)
    return output


def events(store: Store, run_id: str, kind: str) -> list[dict[str, object]]:
    return [json.loads(detail) for _, detail in store.events(run_id, kind)]


def test_an_llm_edit_becomes_champion_and_a_hostile_one_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [Status(429, headers={"retry-after": "0"}), Reply(GOOD_EDIT),
              Reply("VERDICT: CLEAN\nonly the OpenMP switch changed"), Reply(HOSTILE_REPLY)]
    # the LLM agent, the space's starting points one after another (as many as the run's
    # host probes name, and a refused one again over a champion crowned after it), then
    # six domains, then the LLM agent again: enough evaluations for its second turn. The
    # probe of fresh pages is a timing the run takes again, and a loaded host can read it
    # either way: count the starting points it can add (a later, third turn gets an empty
    # reply and proposes nothing)
    monkeypatch.setattr(delta_kernels, "faults_are_costly", lambda: True)
    evaluations = 9 + 2 * len(design_space("kda").starting)
    monkeypatch.undo()
    with FakeLLM(script, default=Reply("")) as llm:
        run_swarmfab(tmp_path, llm, "llm,builtin",
                     GOAL.format(budget="300s", evaluations=evaluations, repairs=1, retries=1))
    store = Store(tmp_path / "x.db")
    run = store.run(None)
    assert run.status == "finished" and run.goal["agents"] == ["llm", "builtin"]
    rows = {row.candidate_id: (row, verdict) for row, verdict in store.verdicts(run.id)}
    by_llm = [(row, verdict) for row, verdict in rows.values()
              if row.agent == "llm-vectorisation"]
    # a third turn, if the run had one, got an empty reply: no candidate
    assert len(by_llm) == 2 and len(rows) == evaluations
    (good_row, good), (bad_row, bad) = by_llm
    assert good.status is Verdicts.ACCEPTED and good_row.became_champion
    assert any(t.comparison == "faster" for t in good.timings)
    assert "#define CH_UNROLL 2" in store.candidate(good_row.candidate_id).sources[
        "kda_chunked.c"]
    assert bad.status is Verdicts.REJECTED and not bad_row.became_champion
    assert bad.failed_check is not None  # caught by the verifier's probes (memo by pointer)
    reviews = events(store, run.id, "llm-review")
    assert [(r["candidate"], r["opinion"]) for r in reviews] == [(good_row.candidate_id,
                                                                   "clean")]
    calls = len(events(store, run.id, "llm-call"))  # the agent's; the reviewer's below
    assert calls >= 2  # the two scripted edits (a third turn: an empty reply, repaired)
    shown = subprocess.run([sys.executable, "-m", "swarmfab", "show", "--json", "--db",
                            str(tmp_path / "x.db")], capture_output=True, text=True, check=True)
    llm_summary = json.loads(shown.stdout)["llm"]
    assert llm_summary["calls"] == calls + 1 and llm_summary["input_tokens"] == (
        calls + 1) * 1200
    assert llm_summary["cost_usd"] == pytest.approx(
        (calls + 1) * (1200 * 2.0 + 300 * 8.0) / 1e6)
    assert llm_summary["reviews"] == [{"candidate": good_row.candidate_id, "opinion": "clean"}]


def test_an_llm_only_run_survives_every_failure_and_repairs_before_it_abandons(
    tmp_path: Path,
) -> None:
    script = [Hang(30), Raw("{not json"), Reply(""), Reply(NO_COMPILE), Reply(HOSTILE_REPLY),
              Reply(GOOD_EDIT), Reply("VERDICT: SUSPICIOUS\nthe decay is computed once?")]
    with FakeLLM(script, default=Reply("")) as llm:
        output = run_swarmfab(tmp_path, llm, "llm",
                              GOAL.format(budget="300s", evaluations=3, repairs=2, retries=0))
        prompts = [request.prompt for request in llm.requests]
    store = Store(tmp_path / "x.db")
    run = store.run(None)
    verdicts = [(row, verdict) for row, verdict in store.verdicts(run.id)]
    assert [v.status for _, v in verdicts] == [Verdicts.BUILD_FAILED, Verdicts.REJECTED,
                                               Verdicts.ACCEPTED]
    assert run.champion_id == verdicts[2][0].candidate_id
    assert verdicts[1][1].failed_check is not None  # the hostile file, caught by a probe
    assert store.candidate(verdicts[1][0].candidate_id).parents == (verdicts[0][0].candidate_id,)
    errors = events(store, run.id, "llm-error")
    assert [e["kind"] for e in errors] == ["timeout", "malformed"]
    assert len(events(store, run.id, "llm-edit-failed")) == 1  # the empty reply
    repairs = events(store, run.id, "llm-repair")
    assert [r["status"] for r in repairs] == ["build_failed"]
    assert "not_declared" in prompts[4]  # the compiler's error went back to its author
    abandoned = events(store, run.id, "llm-abandoned")
    assert [a["status"] for a in abandoned] == ["rejected"]
    assert "failed" in str(abandoned[0]["reason"])
    assert "Repair turn" not in prompts[5]  # a fresh attempt after the abandonment
    review = events(store, run.id, "llm-review")
    assert [r["opinion"] for r in review] == ["suspicious"]  # advisory: still champion
    assert "reviewer on" in output
