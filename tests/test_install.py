"""``pip install swarmfab`` without extras gives a working ``run``, ``verify``, ``bench`` and
``export``: a fresh virtual environment (no system site-packages), torch, then the package
built from this tree, and each command on a small shape. It needs the package index (a
few minutes): ``make test-integration`` runs it (SWARMFAB_INTEGRATION=1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")  # as the Makefile installs it
# what the extras bring: none of it may come with the core
EXTRAS_PACKAGES = ("openai", "anthropic", "fastapi", "uvicorn", "httpx", "safetensors",
                   "tokenizers", "prometheus_client", "psycopg", "matplotlib", "numba", "ray",
                   "triton", "transformers")
TINY_GOAL = """workload = "kda"
budget = "90s"
threads = 1
max_evaluations = 2

[[shapes]]
B = 1
T = 64
H = 2
K = 16
V = 16
"""
RENDER_DEFAULT = """import sys
from swarmfab.workloads import design_space
space = design_space("kda")
candidate = space.instantiate(space.default(), threads=1)
open(sys.argv[1], "w").write(candidate.sources[candidate.entry])
"""
CALL_EXPORTED = """import torch, kda_champion
B, T, H, K, V = 1, 16, 2, 16, 16
q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
v, g = torch.randn(B, T, H, V), -torch.rand(B, T, H, K)
o, state = kda_champion.forward(q, k, v, g, torch.rand(B, T, H), output_final_state=True)
assert o.shape == (B, T, H, V) and state.shape == (B, H, K, V), (o.shape, state.shape)
"""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("SWARMFAB_INTEGRATION") != "1",
                       reason="make test-integration runs it (SWARMFAB_INTEGRATION=1)"),
    pytest.mark.timeout(1500),
]


def _source_copy(into: Path) -> Path:
    """What a wheel is built from (building in place would leave build/ and egg-info in
    a tree other processes use)."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, into / name)
    shutil.copytree(ROOT / "src", into / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return into


def _run(*command: str | Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "SWARMFAB_DB")}
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)
    assert done.returncode == 0, (f"{' '.join(map(str, command))} exited "
                                  f"{done.returncode}:\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done


# a venv with the CPU build of torch holds about 1.2 GB, more while pip unpacks it
VENV_NEEDS_MB = 2500


def test_the_core_install_runs_verifies_benches_and_exports(tmp_path: Path) -> None:
    free_mb = shutil.disk_usage(tmp_path).free // 2**20
    if free_mb < VENV_NEEDS_MB:
        pytest.skip(f"a fresh venv with torch needs about {VENV_NEEDS_MB} MB free under "
                    f"{tmp_path}; {free_mb} MB are: free some disk")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path, timeout=120)
    python, swarmfab = venv / "bin" / "python", venv / "bin" / "swarmfab"
    pip = (python, "-m", "pip", "install", "--quiet")
    _run(*pip, TORCH_SPEC, cwd=tmp_path, timeout=600)
    _run(*pip, _source_copy(tmp_path / "source"), cwd=tmp_path, timeout=600)
    present = _run(python, "-c", "import importlib.util as u, sys; print(' '.join(m for m "
                   "in sys.argv[1:] if u.find_spec(m)))", *EXTRAS_PACKAGES,
                   cwd=tmp_path, timeout=60).stdout.split()
    assert present == [], f"the core install brought what extras are for: {present}"
    assert _run(swarmfab, "--version", cwd=tmp_path, timeout=60).stdout.startswith("swarmfab ")

    work = tmp_path / "work"
    work.mkdir()
    where = ("--db", work / "store.db", "--workdir", work / "wd")
    # verify: the design space's default C kernel, rendered to a file
    _run(python, "-c", RENDER_DEFAULT, work / "default.c", cwd=work, timeout=120)
    _run(swarmfab, "verify", "kda", work / "default.c", "--fast", "--threads", "1", *where,
         cwd=work, timeout=300)
    # bench: the default candidate beside the PyTorch baselines on one small shape
    tables = json.loads(_run(swarmfab, "bench", "kda", "--candidate", "default", "--shape",
                             "1,64,2,16,16", "--threads", "1", "--json", *where, cwd=work,
                             timeout=300).stdout)
    assert tables[0]["shape"] == "B1 T64 H2 K16 V16"
    assert {"candidate", "torch-recurrent"} <= set(tables[0]["seconds"])
    # run: two evaluations on a tiny goal, whose first candidate beats PyTorch by far
    (work / "tiny.toml").write_text(TINY_GOAL)
    _run(swarmfab, "run", work / "tiny.toml", "--fail-if-no-champion", *where, cwd=work,
         timeout=400)
    # export: the champion as a package, installed and called
    _run(swarmfab, "export", "latest", "--out", work / "champion", "--db", work / "store.db",
         cwd=work, timeout=300)
    wheels = sorted((work / "champion" / "dist").glob("*.whl"))
    assert wheels, sorted(p.name for p in (work / "champion").iterdir())
    _run(*pip, "--no-deps", wheels[0], cwd=work, timeout=300)
    _run(python, "-c", CALL_EXPORTED, cwd=tmp_path, timeout=300)
