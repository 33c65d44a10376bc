"""``swarmfab refresh``: champions checked against this host, re-verified on the grown
corpus and re-timed; a stale one gets a verified successor, and nothing recorded is lost.

A store "from another host" is a real store whose runs' host records are rewritten the
way another machine would have written them: the ISA this CPU lacks or adds, another
torch. What this host has is read from it, never assumed.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.goal import default_goal
from swarmfab.knowledge import Store
from swarmfab.knowledge.generations import Generations
from swarmfab.records import Candidate, Status
from swarmfab.swarm.hosts import host_record
from swarmfab.swarm.refresh import environment_changes, slower_than_recorded
from swarmfab.workloads import Case, Distribution, Shape

# alone, after the parallel suite: a champion's lead is re-timed against the recorded
# one, and a core kept busy by another test halves it (a stale verdict for a current one)
pytestmark = pytest.mark.exclusive

# calls of about a millisecond: at tens of microseconds (T64 H2 K32) the champion's lead
# over torch-recurrent read 52x in the run's closing table and 38-43x in a refresh
# minutes later, one refresh in two (each table subtracts its own sessions' round trips)
SHAPE = {"B": 1, "T": 256, "H": 4, "K": 64, "V": 64}
GOAL = ('workload = "kda"\nbudget = "120s"\nthreads = 1\n'
        'shapes = [{B = 1, T = 256, H = 4, K = 64, V = 64}]\n')
# right everywhere but at T = 77, which no built-in case has: a later counterexample
WRONG_AT_T77 = '''from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state, chunk=64)
    if q.shape[1] == 77:
        o = o * 1.5
    return o, state if output_final_state else None
'''

runner = CliRunner()


def _cli(*args: Any) -> Any:
    done = runner.invoke(app, [str(arg) for arg in args])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return done


# -- what counts as a change of host or software ---------------------------------------
def test_a_lost_or_added_vector_extension_is_a_change_with_the_widest_named_first() -> None:
    avx2 = {"isa": "x86_64 avx avx2 fma"}
    avx512 = {"isa": "x86_64 avx avx2 avx512_vnni avx512bw avx512f fma"}
    [lacks] = environment_changes(avx512, avx2, cores=2)
    assert lacks.startswith("ISA: this host lacks avx512f, avx512bw, avx512_vnni")
    [adds] = environment_changes(avx2, avx512, cores=2)
    assert adds.startswith("ISA: this host adds avx512f")
    assert environment_changes(avx2, {"isa": "aarch64 neon"}, cores=2)[0] == \
        "architecture x86_64 -> aarch64"


def test_versions_and_threads_are_compared_and_unrecorded_facts_are_not_changes() -> None:
    here = host_record(1, "c")
    assert environment_changes(here, here, cores=1) == []
    older = {**here, "torch": "2.0.0+cpu", "compiler": "gcc 9", "threads": 8}
    assert environment_changes(older, here, cores=2) == [
        f"the compiler: gcc 9 -> {here['compiler']}", f"torch: 2.0.0+cpu -> {here['torch']}",
        "the goal asks for 8 threads; this host has 2 cores"]
    # a run from before versions were recorded: nothing to compare, nothing changed
    assert environment_changes({"isa": here["isa"], "threads": 1}, here, cores=1) == []


def test_slower_than_recorded_means_below_90_percent_of_the_recorded_interval() -> None:
    recorded = [54.68, 50.0, 58.0]  # median, low, high
    assert not slower_than_recorded(47.83, recorded)  # above 45: within both noises
    assert slower_than_recorded(44.9, recorded)
    assert slower_than_recorded(48.0, [54.68])  # no interval recorded: its median
    assert not slower_than_recorded(50.0, [54.68, math.nan, math.nan])


# -- whole refreshes -------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one real run and its champion (two evaluations)."""
    home = tmp_path_factory.mktemp("recorded")
    (home / "goal.toml").write_text(GOAL)
    done = _cli("run", home / "goal.toml", "--max-evaluations", 2, "--db", home / "x.db",
                "--workdir", home / "work")
    assert done.exit_code == 0, done.output
    assert Store(home / "x.db").run(None).champion_id is not None
    return home


def _copy(recorded: Path, tmp_path: Path, **host: str) -> Path:
    """The recorded store as if its run had been made on a host with ``host`` facts."""
    target = tmp_path / "x.db"
    origin, copy = sqlite3.connect(recorded / "x.db"), sqlite3.connect(target)
    origin.backup(copy)
    origin.close()
    for key, value in host.items():
        copy.execute("UPDATE runs SET host = json_set(host, ?, ?)", (f"$.{key}", value))
    copy.commit()
    copy.close()
    shutil.copytree(recorded / "work", tmp_path / "work")  # its build cache, warm
    return target


def _refresh(db: Path, *args: Any) -> list[dict[str, Any]]:
    done = _cli("refresh", "--db", db, "--workdir", db.parent / "work", "--json", *args)
    assert done.exit_code == 0, done.output
    return list(json.loads(done.stdout))


def _evidence(store: Store, run_id: str) -> list[tuple[str, str, bool, str | None]]:
    return [(row.candidate_id, row.status, row.became_champion, row.demoted)
            for row, _ in store.verdicts(run_id)]


def _other_isa() -> str:
    """This host's ISA record with its widest extension gone (or one added)."""
    isa = host_record(1, "c")["isa"].split()
    wide = [flag for flag in isa if flag.startswith(("avx512", "amx"))]
    kept = [flag for flag in isa if flag not in wide] if wide else [*isa, "avx512f"]
    return " ".join(kept)


@pytest.mark.slow
def test_an_unchanged_champion_is_current_with_its_speed_measured_again(
    recorded: Path, tmp_path: Path,
) -> None:
    db = _copy(recorded, tmp_path)
    [check] = _refresh(db, "--check-only", "--budget", "5m")
    assert check["state"] == "current", check["reasons"]
    assert check["verifies"] is True
    [figure] = check["figures"]
    assert figure["shape"] == "B1 T256 H4 K64 V64" and figure["recorded"]
    assert figure["now"][1] <= figure["now"][0] <= figure["now"][2]
    assert check["successor"] is None
    assert Generations(Store(db)).of(check["run_id"]).state == "current"


@pytest.mark.slow
def test_a_champion_from_another_isa_gets_a_verified_successor_and_loses_nothing(
    recorded: Path, tmp_path: Path,
) -> None:
    db = _copy(recorded, tmp_path, isa=_other_isa(), torch="2.0.0+cpu")
    store = Store(db)
    old = store.run(None)
    before = _evidence(store, old.id)

    [check] = _refresh(db, "--budget", "150s", "--max-evaluations", "2")
    assert check["state"] == "stale"
    assert any(reason.startswith("ISA: this host") for reason in check["reasons"])
    assert f"torch: 2.0.0+cpu -> {host_record(1, 'c')['torch']}" in check["reasons"]
    assert check["successor"] is not None, check["note"]

    store = Store(db)
    successor = store.run(check["successor"])
    assert successor.status == "finished"
    assert successor.goal["shapes"] == old.goal["shapes"]
    if successor.champion_id is not None:  # the successor's champion passed the gate here
        crowned = [v for row, v in store.verdicts(successor.id) if row.became_champion]
        assert crowned and all(v.status is Status.ACCEPTED for v in crowned)
    assert successor.host["isa"] == host_record(1, "c")["isa"]
    # the first generation is intact: run, champion, every verdict
    assert store.run(old.id).champion_id == old.champion_id
    assert _evidence(store, old.id) == before
    generations = Generations(store)
    assert generations.lineage(old.id) == [old.id, successor.id]
    assert generations.of(successor.id).predecessor == old.id
    shown = _cli("show", old.id, "--db", db)
    assert f"succeeded by run {successor.id}" in shown.output
    assert "stale" in _cli("runs", "--db", db).output
    # a second refresh checks the successor, not the generation it replaced
    assert [c["run_id"] for c in _refresh(db, "--check-only")] == [successor.id]


@pytest.mark.slow
def test_another_torch_makes_a_champion_stale_and_a_spent_budget_starts_no_run(
    recorded: Path, tmp_path: Path,
) -> None:
    db = _copy(recorded, tmp_path, torch="1.13.1")
    [check] = _refresh(db, "--budget", "2s")  # the check outlasts it: no time for a run
    assert check["state"] == "stale" and check["verifies"] is True
    torch_moved, *slower = check["reasons"]
    assert torch_moved == f"torch: 1.13.1 -> {host_record(1, 'c')['torch']}"
    # on a busy host the champion's lead over torch may also be found smaller now
    assert all("recorded" in reason for reason in slower), slower
    assert check["successor"] is None and "larger --budget" in check["note"]
    assert len(Store(db).runs()) == 1


def test_a_champion_that_fails_a_later_counterexample_is_stale_and_kept(
    tmp_path: Path,
) -> None:
    """Crowned before the corpus had a T = 77 case; that case now rejects it."""
    from swarmfab.swarm.launch import evaluator_for

    db, goal = tmp_path / "x.db", default_goal("kda").with_overrides(threads=1, shapes=[SHAPE])
    store = Store(db)
    candidate = Candidate("kda", "python", {"wrong77.py": WRONG_AT_T77}, "wrong77.py")
    verdict = evaluator_for(goal, tmp_path / "work", store).verify(candidate)
    assert verdict.status is Status.ACCEPTED, verdict.reason  # the corpus then: no T = 77
    run_id = store.start_run("kda", goal.model_dump(mode="json"), host_record(1, "python"))
    store.record(run_id, candidate, verdict)
    store.set_champion(run_id, candidate.id)
    store.finish_run(run_id, "finished", None)
    case = Case("found-later-t77", Shape(B=1, T=77, H=2, HV=2, K=16, V=16), Distribution(),
                3, "fuzz")
    assert store.add_case("kda", case)

    [check] = _refresh(db, "--budget", "5s")
    assert check["state"] == "stale" and check["verifies"] is False
    [reason] = check["reasons"]
    assert reason.startswith("no longer verifies on the current corpus (case found-later-t77)")
    assert Store(db).run(run_id).champion_id == candidate.id  # recorded, not demoted
    [recalled] = Store(db).champions("delta-rule")
    assert recalled.failed_refresh  # recall offers it after every champion that verifies
    # the case's worth, as `corpus list` and the report show it: a later run's verdict
    assert store.case_rejections("kda") == {}  # a refresh is a check, not a verdict
    later = store.start_run("kda", goal.model_dump(mode="json"), host_record(1, "python"))
    again = evaluator_for(goal, tmp_path / "work", store).verify(candidate)
    store.record(later, candidate, again)
    assert store.case_rejections("kda") == {"found-later-t77": 1}
    listed = _cli("corpus", "list", "kda", "--db", db, "--json")
    [found] = [c for c in json.loads(listed.stdout) if c["name"] == "found-later-t77"]
    assert found["rejected_later"] == 1
