"""`swarmfab export`: the champion installs into a fresh virtual environment, imports,
matches the float64 reference, and refuses a CPU without the features it was verified on.

The same holds for a champion built for each vector target the host can run (``avx2``
on any x86-64-v3 CPU, ``avx512`` where the CPU has it; others skipped with the reason):
the recorded run's champion is re-rendered for the target in a copy of the store, as if
the run had crowned that setting.

The fresh environment sees this interpreter's packages through a `.pth` line (torch,
numpy, setuptools, swarmfab for the reference), so nothing is downloaded: `pip install
--no-index --no-build-isolation DIR`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

import swarmfab.report.export as exporting
from swarmfab.cli import app
from swarmfab.kernels._host import isa_targets
from swarmfab.knowledge import Store
from swarmfab.knowledge._schema import CandidateRow, RunRow, VerdictRow
from swarmfab.records import Candidate
from swarmfab.report.export import _VECTOR_FEATURES
from swarmfab.workloads import design_space

# a fresh virtual environment per module and an install into it: make test-integration's
pytestmark = [pytest.mark.slow, pytest.mark.integration]

CHECK = """
import torch
import {name}
from swarmfab.workloads import Case, Shape, get_workload

workload = get_workload("kda")
inputs = workload.make_inputs(Case("x", Shape(2, 40, 2, 4, 32, 16, initial_state=True)))
reference = workload.reference(inputs)
outputs = workload.call({name}.forward, inputs)
errors = [float((outputs[n].double() - reference[n]).norm() / reference[n].norm())
          for n in reference]
assert max(errors) < 1e-5, errors

# an engine's step: states updated in place at shuffled slots of a pool
pooled = workload.make_inputs(Case("p", Shape(3, 5, 2, 4, 32, 16, True, pool=6), seed=1))
reference = workload.reference(pooled)
pool = pooled["initial_state"]
outputs = workload.call({name}.forward, pooled)
assert outputs["final_state"].data_ptr() == pool.data_ptr()
errors = [float((outputs[n].double() - reference[n]).norm() / reference[n].norm())
          for n in reference]
assert max(errors) < 1e-5, errors
try:
    {name}.forward(*(pooled[n] for n in ("q", "k", "v", "g", "beta")), initial_state=pool,
                   inplace_final_state=True, state_indices=[0, 1, 6])
except ValueError as error:
    assert "outside the pool" in str(error)
else:
    raise AssertionError("a slot outside the pool was accepted")

q, k, v, g, beta = (inputs[n].float() for n in ("q", "k", "v", "g", "beta"))
o, state = {name}.forward(q, k, v.bfloat16(), g, beta)  # fla: o in v's dtype
assert o.dtype == torch.bfloat16 and state is None
raw = {name}.forward(q * 3, k * 2, v, g, beta, use_qk_l2norm_in_kernel=True)[0]
unit = {name}.forward(q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True),
                      v, g, beta)[0]
assert torch.allclose(raw, unit, rtol=1e-4, atol=1e-5)
try:
    {name}.forward(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 40]))
except ValueError as error:
    assert "cu_seqlens" in str(error)
else:
    raise AssertionError("cu_seqlens was accepted")
print("ok", {name}.__file__)
"""


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment that sees this interpreter's packages, nothing else."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; "
                          "print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(own, "parent-packages.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return python


def _export(db: Path, out: Path, *extra: str) -> None:
    result = CliRunner().invoke(app, ["export", "latest", "--db", str(db), "--out", str(out),
                                      *extra])
    assert result.exit_code == 0, result.output


def _install(python: Path, package_dir: Path) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index",
                           "--no-build-isolation", str(package_dir)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _use(python: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path, check=False)


def test_an_exported_champion_installs_imports_and_matches_the_reference(
    recorded_run: Any, fresh_venv: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "exported"
    _export(recorded_run.db, out)
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["candidate"] == recorded_run.champion_id
    assert provenance["compiler"].startswith(("gcc", "cc", "clang"))
    assert provenance["host_fingerprint"].endswith("| 1 threads")
    assert provenance["lineage"][0]["id"] == recorded_run.champion_id
    assert provenance["lineage"][-1]["gain_over_incumbent"]  # the root beat the baselines
    assert "## Lineage" in (out / "VERIFICATION.md").read_text()

    _install(fresh_venv, out)
    used = _use(fresh_venv, CHECK.format(name="kda_champion"), tmp_path)
    assert used.returncode == 0, used.stderr
    assert "site-packages/kda_champion" in used.stdout  # the installed copy, not the tree
    # the library built at export, with the verified flags, ships in the package: nothing
    # is compiled at import
    assert not list((tmp_path / "cache").glob("kda_champion/*/kernel.so"))
    assert list((out / "dist").glob("kda_champion-1.0.0-py3-none-*.whl"))


@pytest.mark.parametrize("isa", ["avx2", "avx512"], indirect=True)
def test_an_exported_champion_built_for_each_vector_target_installs_and_matches(
    recorded_run: Any, fresh_venv: Path, tmp_path: Path, isa: str,
) -> None:
    db, champion = _crowned_for(isa, recorded_run, tmp_path)
    out = tmp_path / "exported"
    name = f"kda_{isa.replace('-', '_')}"
    _export(db, out, "--name", name)
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["candidate"] == champion.id
    assert provenance["knobs"]["isa"] == isa
    assert set(dict(isa_targets())[isa]) <= set(provenance["flags"])

    _install(fresh_venv, out)
    used = _use(fresh_venv, CHECK.format(name=name), tmp_path)
    assert used.returncode == 0, used.stderr
    assert f"site-packages/{name}" in used.stdout


def test_an_exported_champion_refuses_a_cpu_without_its_features(
    recorded_run: Any, fresh_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    present = set(_cpu_flags())
    absent = [f for f in _VECTOR_FEATURES if f not in present]
    if not absent:  # this CPU has every feature an export checks for: add one no CPU has
        absent = ["avx9000"]
        monkeypatch.setattr(exporting, "_VECTOR_FEATURES", (*_VECTOR_FEATURES, *absent))
    db = recorded_run.copy_store(tmp_path)
    store = Store(db)
    with store.session() as session:  # as if the run had been recorded on a bigger CPU
        run = session.get(RunRow, recorded_run.run_id)
        assert run is not None
        run.host = {**run.host, "isa": f"{run.host['isa']} {absent[0]}"}
    out = tmp_path / "elsewhere"
    _export(db, out, "--name", "kda_elsewhere")
    provenance = json.loads((out / "provenance.json").read_text())
    assert absent[0] in provenance["required_cpu_features"]

    _install(fresh_venv, out)
    used = _use(fresh_venv, "import kda_elsewhere", tmp_path)
    assert used.returncode != 0
    last = used.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: kda_elsewhere was verified on a CPU with"), last
    assert last.endswith(f"this host lacks {absent[0]}. Re-run swarmfab on this host to get a "
                         "kernel verified for it."), last
    assert not (tmp_path / "cache").exists()  # refused before building anything


def _crowned_for(isa: str, recorded_run: Any, directory: Path) -> tuple[Path, Candidate]:
    """A copy of the recorded store whose champion is the recorded one's setting with the
    ``isa`` knob set to ``isa`` (its verdict moved to it), and that candidate."""
    db = recorded_run.copy_store(directory)
    store = Store(db)
    recorded = store.candidate(recorded_run.champion_id)
    space = design_space(recorded.workload)
    threads = int(store.run(recorded_run.run_id).goal["threads"])
    champion = space.instantiate({**recorded.knobs, "isa": isa}, threads=threads,
                                 parents=recorded.parents, agent=recorded.agent,
                                 rationale=recorded.rationale)
    if champion.id == recorded.id:  # the run crowned this target itself
        return db, champion
    with store.session() as session:
        run = session.get(RunRow, recorded_run.run_id)
        assert run is not None
        if session.get(CandidateRow, champion.id) is None:
            session.add(CandidateRow(id=champion.id, workload=champion.workload,
                                     backend=champion.backend, body=champion.to_dict(),
                                     agent=champion.agent))
        else:  # the run evaluated this setting itself: the champion's verdict replaces its own
            for own in session.scalars(select(VerdictRow).where(
                    VerdictRow.run_id == run.id, VerdictRow.candidate_id == champion.id)):
                session.delete(own)
        run.champion_id = champion.id
        verdict = session.scalars(select(VerdictRow).where(
            VerdictRow.run_id == run.id, VerdictRow.candidate_id == recorded.id)).one()
        verdict.candidate_id = champion.id
        verdict.body = {**verdict.body, "candidate_id": champion.id}
    return db, champion


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo: the export cannot check features here either")
    return next((line.split(":", 1)[1].split() for line in text.splitlines()
                 if line.startswith("flags")), [])
