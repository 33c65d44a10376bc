"""`swarmfab doctor --json`: every section, and the sandbox's findings tried for real (a
confined child's hostile attempts all refused wherever it reports full isolation)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.sandbox import STEPS
from swarmfab.sandbox.probe import ATTEMPTS


def test_doctor_reports_every_section_and_what_holds_for_each_user(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", "--json", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert set(found) == {"host", "compilers", "torch", "sandbox", "ray", "postgresql", "gpu",
                          "caches"}
    assert found["host"]["isa"] and found["host"]["cores"] >= 1
    assert {"gcc", "clang", "nvcc"} <= set(found["compilers"])
    assert found["torch"]["version"]
    assert {"importable"} <= set(found["ray"]) and "programs" in found["postgresql"]
    assert "cuda available" in found["gpu"] and "importable" in found["gpu"]["triton"]
    assert found["caches"]["workdir"]["path"] == str(tmp_path.resolve())
    sandbox = found["sandbox"]
    assert "landlock abi" in sandbox["means"]
    others = ["an ordinary user"] if os.geteuid() == 0 else ["root"]
    assert set(sandbox) == {"means", "this user", *others}
    for who in ("this user", *others):
        probed = sandbox[who]
        if "error" in probed:
            continue
        assert set(probed["held"]) | set(probed["failed"]) <= set(STEPS)
        assert list(probed["attempts"]) == list(ATTEMPTS)
        if probed["level"] == "full":
            assert all(got.startswith("refused") for got in probed["attempts"].values()), \
                (who, probed)
            assert probed["escaped"] == []
    text = CliRunner().invoke(app, ["doctor", "--workdir", str(tmp_path)])
    assert text.exit_code == 0 and "sandbox for this user: " in text.output, text.output
