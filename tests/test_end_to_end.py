"""End to end, as a user runs it: `python -m swarmfab run` (the session's recorded run:
``recorded_run`` in tests/conftest.py, the report tests read the same), then export,
build, install, report and a related run from the same store."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swarmfab.knowledge import Store
from swarmfab.records import Status


def swarmfab(*args: str | Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "swarmfab", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_run_export_report(recorded_run: Any, tmp_path: Path) -> None:
    assert "Traceback" not in recorded_run.stdout + recorded_run.stderr
    assert "champion" in recorded_run.stdout

    store = Store(recorded_run.db)
    run = store.run(None)
    assert run.id == recorded_run.run_id and run.status == "finished"
    assert run.champion_id == recorded_run.champion_id
    assert run.champion_id in recorded_run.stdout
    crowned = [(row, v) for row, v in store.verdicts(run.id) if row.candidate_id == run.champion_id]
    assert len(crowned) == 1
    row, verdict = crowned[0]
    assert row.became_champion
    assert verdict.status is Status.ACCEPTED
    assert any(t.comparison == "faster" for t in verdict.timings)
    assert run.summary is not None and run.summary["champion"] == run.champion_id
    assert 0.0 <= run.summary["overhead"] < 1.0  # the platform's share of the search time
    assert run.summary["archive"], "verified candidates are filed in the archive"
    assert [s["shape"] for s in run.summary["shapes"]] == ["B1 T128 H2 K32 V32",
                                                            "B2 T32 H2 K16 V16"]
    champion = store.candidate(run.champion_id)
    assert (recorded_run.workdir / "runs" / run.id / "champion" / champion.entry).is_file()
    assert not (recorded_run.home / ".swarmfab").exists()  # every path went where we said

    db = recorded_run.copy_store(tmp_path)  # what follows may write to the store
    out = tmp_path / "exported"
    exported = swarmfab("export", "--out", out, "--db", db, cwd=tmp_path, timeout=120)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["run"] == run.id
    assert provenance["candidate"] == run.champion_id
    assert provenance["verdict"]["status"] == "accepted"
    assert provenance["lineage"][0]["id"] == run.champion_id
    # the champion met the battery before its crowning, and the evidence says so
    assert provenance["battery"].startswith("passed: correct on "), provenance["battery"]
    assert "the battery's" in provenance["battery"]
    assert "## The battery" in (out / "VERIFICATION.md").read_text()
    assert run.summary["search"]["battery_seconds"] > 0
    source = out / provenance["entry"]
    assert source.read_text() == champion.sources[champion.entry]
    # the recorded build command builds the exported source as it stands
    build = subprocess.run(shlex.split(provenance["build"]), cwd=out, capture_output=True,
                           text=True, timeout=120, check=False)
    assert build.returncode == 0, build.stderr
    assert (out / "kernel.so").is_file()
    _installed_package_matches_the_reference(out, tmp_path)

    report = swarmfab("report", "--json", "--db", db, cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["run"] == run.id
    assert data["champion"] == run.champion_id
    assert data["status"] == "finished"
    assert sum(data["counts"].values()) == len(data["verdicts"]) >= 1
    crowned_ids = [v["candidate"] for v in data["verdicts"] if v["champion"]]
    assert crowned_ids[-1] == run.champion_id  # every crowning is kept; the last one holds

    listed = swarmfab("runs", "--db", db, cwd=tmp_path, timeout=120)
    assert listed.returncode == 0
    assert run.id in listed.stdout
    goal = recorded_run.home / "goal.toml"
    _a_related_run_starts_from_the_champion(goal, db, tmp_path / "work", champion.knobs,
                                            tmp_path)
    assert not (tmp_path / ".swarmfab").exists()


def _a_related_run_starts_from_the_champion(goal: Path, db: Path, workdir: Path,
                                            knobs: dict[str, object], cwd: Path) -> None:
    """GDN after KDA in the same store, on the smaller of its shapes (the same class):
    its first proposal is KDA's champion setting; with --no-lessons nothing is recalled."""
    larger = "{B = 1, T = 128, H = 2, K = 32, V = 32}, "
    text = goal.read_text()
    assert 'workload = "kda"' in text and larger in text
    gdn = cwd / "gdn.toml"
    gdn.write_text(text.replace('workload = "kda"', 'workload = "gdn"').replace(larger, ""))
    for extra in ((), ("--no-lessons",)):
        done = swarmfab("run", gdn, "--max-evaluations", "1", "--db", db, "--workdir", workdir,
                        *extra, cwd=cwd, timeout=240)
        assert done.returncode in (0, 1), done.stdout + done.stderr
        store = Store(db)
        [(first, _)] = store.verdicts(store.run(None).id)
        if extra:
            assert "recalled" not in done.stdout and first.agent != "builtin-recall"
        else:
            assert "1 champion setting(s) recalled" in done.stdout, done.stdout
            assert first.agent == "builtin-recall"
            assert store.candidate(first.candidate_id).knobs == knobs


CHECK_INSTALLED = """
import kda_champion
from swarmfab.workloads import Case, Shape, get_workload
workload = get_workload("kda")
inputs = workload.make_inputs(Case("x", Shape(1, 50, 2, 4, 32, 32, initial_state=True)))
outputs = workload.call(kda_champion.forward, inputs)
reference = workload.reference(inputs)
errors = [float((outputs[n].double() - reference[n]).norm() / reference[n].norm())
          for n in reference]
assert max(errors) < 1e-5, errors
print("ok", kda_champion.__file__)
"""


def _installed_package_matches_the_reference(out: Path, tmp_path: Path) -> None:
    """`pip install DIR` gives an importable package whose forward is correct."""
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    used = subprocess.run([sys.executable, "-c", CHECK_INSTALLED], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path, check=False)
    assert used.returncode == 0, used.stderr
    assert str(site) in used.stdout


MADE_UP_FEATURE = "avx9000"  # no CPU reports it


def _package_requiring(required: list[str], tmp_path: Path) -> Path:
    """An exported KDA package (the template at its default knobs) whose import checks
    for ``required``; returns the directory to put on PYTHONPATH."""
    from swarmfab.report.export import init_source
    from swarmfab.workloads import design_space

    class FakeRun:
        workload, id = "kda", "r1"

    space = design_space("kda")
    champion = space.instantiate(space.default(), threads=1)
    package = tmp_path / "kda_champion"
    package.mkdir()
    (package / champion.entry).write_text(champion.sources[champion.entry])
    (package / "__init__.py").write_text(init_source("kda_champion", FakeRun(), champion,
                                                      required))
    return tmp_path


def _import_package(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-c", "import kda_champion"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120, check=False)


def _a_feature_this_host_has() -> str:
    """A vector feature the running CPU reports (what a package verified here requires)."""
    from swarmfab.kernels._host import host_cpu_flags
    from swarmfab.report.export import _VECTOR_FEATURES

    flags = host_cpu_flags()
    present = [feature for feature in _VECTOR_FEATURES if feature in flags]
    if not present:
        pytest.skip("this CPU reports none of the vector features an export checks for")
    return present[-1]  # the last the export lists: fma on an AVX2 CPU, later on newer ones


def test_an_exported_package_refuses_a_cpu_without_the_features_it_was_verified_on(
    tmp_path: Path,
) -> None:
    present = _a_feature_this_host_has()
    used = _import_package(_package_requiring([present, MADE_UP_FEATURE], tmp_path), tmp_path)
    assert used.returncode != 0
    message = used.stderr.strip().splitlines()[-1]
    assert f"was verified on a CPU with {present}, {MADE_UP_FEATURE};" in message, message
    assert f"this host lacks {MADE_UP_FEATURE}. " in message, message  # that one alone
    assert not (tmp_path / "cache").exists()  # refused before building anything


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_an_exported_package_requiring_only_what_the_host_has_imports(tmp_path: Path) -> None:
    used = _import_package(_package_requiring([_a_feature_this_host_has()], tmp_path), tmp_path)
    assert used.returncode == 0, used.stderr
    assert any((tmp_path / "cache" / "kda_champion").glob("*/kernel.so"))  # built at import
