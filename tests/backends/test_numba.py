"""The numba backend: a Numba candidate is JIT-compiled and verified inside the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.backends import get_backend
from swarmfab.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "candidates" / "kda_numba.py"


@pytest.mark.slow  # Numba compiles the candidate in every sandboxed job
def test_the_numba_example_is_verified_under_the_sandbox(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "verify", "kda", str(EXAMPLE), "--backend", "numba", "--json", "--fuzz", "2",
        "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "work"),
    ])
    verdict = json.loads(result.stdout)
    assert result.exit_code == 0, verdict["reason"]
    assert verdict["status"] == "accepted"


def test_the_numba_backend_is_registered() -> None:
    assert get_backend("numba").name == "numba"
