"""`swarmfab show` in plain text: the goal, the champion and its final figures, as the
README promises, from a store written directly (no run needed)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Status, Verdict

GOAL = {"workload": "kda", "device": "cpu", "budget_s": 90.0, "threads": 2, "workers": None,
        "seed": 7, "max_evaluations": 12, "agents": ["builtin"], "baselines": None,
        "eval_timeout_s": 120.0,
        "shapes": [{"B": 1, "T": 128, "H": 2, "K": 32, "V": 32, "HV": None,
                    "initial_state": False},
                   {"B": 2, "T": 32, "H": 2, "K": 16, "V": 16, "HV": 4,
                    "initial_state": True}]}
FIGURES = [
    {"shape": "B1 T128 H2 K32 V32", "fastest_baseline": "torch-chunked",
     "seconds": {"champion": [0.0005, 0.00048, 0.00052], "torch-chunked": [0.0015, 0.0014, 0.0016],
                 "torch-recurrent": [0.004, 0.0039, 0.0041]},
     "speedup": [3.0, 2.8, 3.2], "samples": 30, "roofline_fraction": 0.12},
    {"shape": "B2 T32 H2/HV4 K16 V16 +h0", "fastest_baseline": "torch-recurrent",
     "seconds": {"champion": [0.0001, 0.00009, 0.00011],
                 "torch-recurrent": [0.0004, 0.00038, 0.00042]},
     "speedup": [4.0, 3.5, 4.4], "samples": 30, "roofline_fraction": None},
]


def _store_with_a_finished_run(db: Path) -> tuple[str, str]:
    store = Store(db)
    run = store.start_run("kda", GOAL, {"machine": "x86_64", "threads": 2})
    champion = Candidate("kda", "c", {"k.c": "int kda_forward(void) { return 0; }\n"}, "k.c",
                         flags=("-O3",), knobs={"algorithm": "recurrent", "tile_v": 32})
    store.record(run, champion, Verdict(champion.id, Status.ACCEPTED, "faster on 2 shapes"))
    store.set_champion(run, champion.id)
    store.finish_run(run, "finished", {"champion": champion.id, "champion_dir": None,
                                       "shapes": FIGURES})
    return run, champion.id


def test_show_prints_the_goal_the_champion_and_its_figures(tmp_path: Path) -> None:
    run, champion = _store_with_a_finished_run(tmp_path / "x.db")
    result = CliRunner().invoke(app, ["show", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"run: {run}" in out and "status: finished" in out
    goal = next(line for line in out.splitlines() if line.strip().startswith("goal:"))
    for fragment in ("kda on cpu", "2 shape(s) (B1 T128 H2 K32 V32; B2 T32 H2/HV4 K16 V16 +h0)",
                     "budget 90s", "threads 2", "workers auto", "seed 7",
                     "max evaluations 12", "agents builtin"):
        assert fragment in goal, goal
    assert f"champion: {champion} (algorithm=recurrent, tile_v=32)" in out
    assert ("B1 T128 H2 K32 V32: 3.00x [2.80, 3.20] over torch-chunked "
            "(1.500 ms [1.400, 1.600] -> champion 0.500 ms [0.480, 0.520]), roofline 12%") in out
    assert ("B2 T32 H2/HV4 K16 V16 +h0: 4.00x [3.50, 4.40] over torch-recurrent "
            "(0.400 ms [0.380, 0.420] -> champion 0.100 ms [0.090, 0.110]), roofline -") in out
    assert "by_status: {'accepted': 1}" in out

    as_json = CliRunner().invoke(app, ["show", run, "--json", "--db", str(tmp_path / "x.db")])
    assert json.loads(as_json.stdout)["champion_figures"] == FIGURES  # unchanged


def test_show_of_a_run_without_a_champion_says_the_baselines_are_the_answer(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "x.db")
    run = store.start_run("kda", {"workload": "kda", "budget": 60, "threads": 1}, {})
    store.finish_run(run, "finished", {"champion": None, "shapes": []})
    result = CliRunner().invoke(app, ["show", "latest", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 0, result.output
    assert "budget 1m" in result.output and "the workload's default shapes" in result.output
    assert "champion: none (no candidate beat the baselines" in result.output
