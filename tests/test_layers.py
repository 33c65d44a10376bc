"""The module map's rule that calls point downward, for the layers a cycle would tangle:
``kernels`` (design spaces) sits below ``workloads``, which declare them."""

from __future__ import annotations

import ast
from pathlib import Path

import swarmfab

PACKAGE = Path(swarmfab.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every ``swarmfab`` module a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] == "swarmfab"}


def test_imported_modules_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom swarmfab.records import Candidate\n"
                      "def f():\n    from swarmfab.workloads import get_workload\n")
    assert imported_modules(source) == {"swarmfab.records", "swarmfab.workloads"}


def test_kernels_import_only_records_and_themselves() -> None:
    files = sorted((PACKAGE / "kernels").rglob("*.py"))
    assert files
    outside = {f"{path.relative_to(PACKAGE)}: {name}"
               for path in files for name in imported_modules(path)
               if not name.startswith(("swarmfab.kernels", "swarmfab.records"))}
    assert not outside, f"kernels/ reaches above itself: {sorted(outside)}"
