"""The command line names its outputs one way: ``--json`` on every command that prints
results (the JSON alone on stdout, progress on stderr), ``--out FILE`` or ``--out DIR``
for what a command writes (``loadgen --result-file`` kept as a hidden alias), and a run
as a positional RUN, an id or ``latest`` (``bench --run RUN``, where the positional is
the workload)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from swarmfab.cli import app
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.swarm.run import RunResult

SHAPE = "B1 T8 H1 K8 V8"
GOAL = 'workload = "kda"\nthreads = 1\nbudget = "30s"\nshapes = [{B=1, T=8, H=1, K=8, V=8}]\n'
FIGURES = [{"shape": SHAPE, "fastest_baseline": "torch-chunked", "speedup": [3.0, 2.8, 3.2],
            "seconds": {"champion": [1e-4, 9e-5, 1.1e-4], "torch-chunked": [3e-4, 2.9e-4, 3.1e-4]}}]
CHAMPION = Candidate("kda", "c", {"k.c": "int kda_forward(void) { return 0; }\n"}, "k.c",
                     knobs={"algorithm": "recurrent"})
# every command that prints results, as invoked
PRINTING = [["run"], ["resume"], ["show"], ["report"], ["runs"], ["export"], ["verify"],
            ["bench"], ["bench-policy"], ["suite"], ["refresh"], ["peaks"], ["lessons"],
            ["corpus", "list"], ["corpus", "show"], ["corpus", "add"], ["doctor"], ["loadgen"]]


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("command", PRINTING, ids=" ".join)
def test_every_command_that_prints_results_takes_json(command: list[str]) -> None:
    assert "--json" in _help(*command)


def test_a_run_is_named_the_same_way_by_every_command() -> None:
    for command in ("show", "report", "export"):
        said = _help(command)
        assert f"swarmfab {command} [OPTIONS] [RUN]" in said, said
        assert "A run id (see `swarmfab runs`) or latest (the default)." in said
    said = _help("resume")
    assert "A run id (see `swarmfab runs`) or latest." in said and "RUN" in said
    said = _help("bench")
    assert "--run RUN" in said and "a run id (see `swarmfab runs`) or latest" in said


def test_an_unknown_run_is_the_same_error_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    Store(db).start_run("kda", {"workload": "kda"}, {})
    for command in (["show"], ["report"], ["export"], ["resume"]):
        result = invoke(*command, "nosuchrun", "--db", db)
        assert result.exit_code == 1, (command, result.output)
        assert "no run 'nosuchrun' in the store" in result.output, (command, result.output)


def test_corpus_add_and_show_print_the_case_as_json(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    added = invoke("corpus", "add", "kda", "--shape", "1,8,1,8,8+h0", "--name", "mine",
                   "--json", "--db", db)
    assert added.exit_code == 0, added.output
    case = json.loads(added.stdout)
    assert case["name"] == "mine" and case["shape"]["initial_state"] is True
    shown = invoke("corpus", "show", "kda", "mine", "--json", "--db", db)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == case


def _finished_run(db: Path) -> str:
    store = Store(db)
    run = store.start_run("kda", {"workload": "kda"}, {"threads": 1})
    store.record(run, CHAMPION, Verdict(CHAMPION.id, Status.ACCEPTED, "faster"))
    store.set_champion(run, CHAMPION.id)
    store.finish_run(run, "finished", {"champion": CHAMPION.id, "shapes": FIGURES})
    return run


def test_runs_prints_json(tmp_path: Path) -> None:
    run = _finished_run(tmp_path / "x.db")
    result = invoke("runs", "--json", "--db", tmp_path / "x.db")
    assert result.exit_code == 0, result.output
    [listed] = json.loads(result.stdout)
    assert listed["run"] == run and listed["champion"] == CHAMPION.id
    assert listed["status"] == "finished" and listed["generation"] == "unchecked"


def test_export_writes_to_out_dir_and_prints_json(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmfab.report import export as exporting

    run = _finished_run(tmp_path / "x.db")

    def export_champion(store: Any, run_id: str | None, out: Path, name: str | None) -> Path:
        (out / "dist").mkdir(parents=True)
        (out / "dist" / "kda_champion-1.0.0-py3-none-any.whl").write_text("")
        return out

    monkeypatch.setattr(exporting, "export_champion", export_champion)
    result = invoke("export", "latest", "--out", tmp_path / "pkg", "--json",
                    "--db", tmp_path / "x.db")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "run": run, "out": str(tmp_path / "pkg"), "kind": "package",
        "wheels": [str(tmp_path / "pkg" / "dist" / "kda_champion-1.0.0-py3-none-any.whl")]}


def _fake_execute(champion: bool) -> Any:
    """Stands in for the swarm: a progress line on the console it is given, a finished run
    in the store."""
    def execute(goal: Any, store: Store, workdir: Path, resume: str | None, *args: Any,
                out: Any = None, **kwargs: Any) -> tuple[RunResult, Any]:
        out.print("progress: 3 evaluations")
        run = resume or store.start_run("kda", goal.model_dump(mode="json"), {})
        if champion and resume is None:
            store.record(run, CHAMPION, Verdict(CHAMPION.id, Status.ACCEPTED, "faster"))
            store.set_champion(run, CHAMPION.id)
        store.finish_run(run, "finished", {"champion": CHAMPION.id if champion else None,
                                           "shapes": FIGURES if champion else []})
        result = RunResult(run, CHAMPION if champion else None,
                           workdir / "champion" if champion else None, 3, {"accepted": 3})
        return result, SimpleNamespace(
            baseline_incumbents={SHAPE: SimpleNamespace(name="torch-chunked")})

    return execute


@pytest.mark.parametrize("champion", [True, False], ids=["champion", "no-champion"])
def test_run_and_resume_print_their_outcome_as_json_and_progress_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, champion: bool,
) -> None:
    running = importlib.import_module("swarmfab.cli.run")  # the module, not the command
    monkeypatch.setattr(running, "execute_goal", _fake_execute(champion))
    (tmp_path / "goal.toml").write_text(GOAL)
    where = ("--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    result = invoke("run", tmp_path / "goal.toml", "--json", *where)
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)  # the JSON alone
    assert "progress: 3 evaluations" in result.stderr
    assert outcome["status"] == "finished" and outcome["evaluations"] == 3
    assert outcome["counts"] == {"accepted": 3}
    assert outcome["fastest_baselines"] == {SHAPE: "torch-chunked"}
    if champion:
        assert outcome["champion"] == CHAMPION.id and outcome["figures"] == FIGURES
        assert outcome["champion_knobs"] == {"algorithm": "recurrent"}
    else:
        assert outcome["champion"] is None and outcome["figures"] == []
        failed = invoke("run", tmp_path / "goal.toml", "--json", "--fail-if-no-champion",
                        *where)
        assert failed.exit_code == 1 and json.loads(failed.stdout)["champion"] is None

    resumed = invoke("resume", outcome["run"], "--json", *where)
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["run"] == outcome["run"]


def test_bench_policy_prints_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmfab.swarm import launch, policy_bench

    monkeypatch.setattr(launch, "evaluator_for",
                        lambda *args, **kwargs: SimpleNamespace(cases=[]))

    class Oracle:
        def __init__(self, *args: Any, log: Any, **kwargs: Any):
            log("timed: 1 candidate")
            self.seconds = {"a": 1e-3, "b": 2e-3}

    monkeypatch.setattr(policy_bench, "SpeedOracle", Oracle)
    monkeypatch.setattr(policy_bench, "compare_policies", lambda *args: [])
    monkeypatch.setattr(policy_bench, "summary", lambda *args: (
        1e-3, [("builtin", [3, None], 3.0), ("uniform-random", [None, None], 31.0)]))
    result = invoke("bench-policy", "kda", "--seeds", "2", "--threads", "1", "--json",
                    "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "timed: 1 candidate" in result.stderr
    assert data["best_known_s"] == 1e-3 and data["distinct_candidates"] == 2
    assert data["policies"][0] == {"policy": "builtin", "evaluations_per_seed": [3, None],
                                   "median": 3.0}


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``run_load`` stood in for: no server is needed."""
    from swarmfab.engine import loadgen

    figures: dict[str, Any] = {"completed": 4, "mean_ttft_ms": 1.5, "itls": [0.1, 0.2]}

    async def run_load(spec: Any) -> dict[str, Any]:
        return figures

    monkeypatch.setattr(loadgen, "run_load", run_load)
    return figures


def test_loadgen_writes_to_out_and_keeps_result_file_as_a_hidden_alias(
    tmp_path: Path, load: dict[str, Any],
) -> None:
    result = invoke("loadgen", "--out", tmp_path / "a.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "a.json").read_text()) == load
    assert "mean_ttft_ms" in result.stdout  # the summary, for a person
    result = invoke("loadgen", "--result-file", tmp_path / "b.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "b.json").read_text()) == load
    assert "--result-file" not in _help("loadgen") and "--out FILE" in _help("loadgen")
    both = invoke("loadgen", "--out", tmp_path / "c.json", "--result-file", tmp_path / "d.json")
    assert both.exit_code == 2 and "former spelling of --out" in both.output
    as_json = invoke("loadgen", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == load
