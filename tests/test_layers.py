"""The module map's rules, held for every package: calls point downward (each package
imports only the packages its row names, and the rows form no cycle), no package
reaches into another's private (underscore) modules, nothing but the command line
imports the command layer, and files stay readable in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import swarmfab

PACKAGE = Path(swarmfab.__file__).parent
SCRIPTS = PACKAGE.parents[1] / "scripts"
MAX_LINES = 550  # "about 500": a file past this is split

# What each unit (a package, or a module at the package root) may import besides itself.
# A new arrow is a design decision: add it here, and to docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    "errors": set(), "records": set(), "paths": set(),
    "kernels": {"records"},
    "sandbox": {"errors"},
    "workloads": {"errors", "kernels", "paths"},
    "goal": {"errors", "workloads"},
    "verify": {"records", "workloads"},
    "backends": {"errors", "kernels", "records", "workloads"},
    "measure": {"backends", "records"},
    "engine": {"errors", "kernels", "workloads"},
    "knowledge": {"errors", "kernels", "measure", "records", "workloads"},
    "evaluation": {"backends", "errors", "kernels", "measure", "paths", "records", "sandbox",
                   "verify", "workloads"},
    "agents": {"errors", "goal", "kernels", "knowledge", "records", "sandbox", "workloads"},
    "swarm": {"agents", "backends", "errors", "evaluation", "goal", "kernels", "knowledge",
              "measure", "paths", "records", "sandbox", "verify", "workloads"},
    "serving": {"agents", "backends", "engine", "errors", "goal", "kernels", "knowledge",
                "measure", "records", "swarm", "workloads"},
    "report": {"errors", "evaluation", "goal", "knowledge", "measure", "records", "serving",
               "swarm", "workloads"},
    "model": {"errors", "kernels", "measure", "records", "verify", "workloads"},
    "cli": {"backends", "engine", "errors", "evaluation", "goal", "knowledge", "measure",
            "model", "records", "report", "serving", "swarm", "verify", "workloads"},
    "__main__": {"cli"},
}


def imported_modules(path: Path) -> set[str]:
    """Every ``swarmfab`` module a file imports, at any depth of its code; ``from
    swarmfab.x import y`` counts as both ``swarmfab.x`` and ``swarmfab.x.y`` (y may be a
    module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "swarmfab"}


def unit_of(module: str) -> str | None:
    """The package (or root module) a dotted ``swarmfab`` name belongs to; None for the
    root package itself and its dunder attributes (``swarmfab.__version__``)."""
    parts = module.split(".")
    if len(parts) < 2 or (parts[1].startswith("__") and parts[1] != "__main__"):
        return None
    return parts[1]


def source_files() -> list[tuple[str, Path]]:
    return [(".".join(("swarmfab", *path.relative_to(PACKAGE).with_suffix("").parts)), path)
            for path in sorted(PACKAGE.rglob("*.py"))]


def private_part(module: str) -> str | None:
    """The first underscore component of a dotted name (``__init__`` aside), with its
    owner: ``swarmfab.x._y.z`` -> ``swarmfab.x._y``."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[: i + 1])
    return None


def test_imported_modules_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom swarmfab.records import Candidate\n"
                      "def f():\n    from swarmfab.workloads import get_workload\n")
    assert imported_modules(source) == {"swarmfab.records", "swarmfab.records.Candidate",
                                        "swarmfab.workloads",
                                        "swarmfab.workloads.get_workload"}


def test_private_part_reads_both_spellings(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from swarmfab.knowledge._schema import RunRow\n"
                      "from swarmfab.evaluation import _bound\n")
    privates = {private_part(name) for name in imported_modules(source)} - {None}
    assert privates == {"swarmfab.knowledge._schema", "swarmfab.evaluation._bound"}


def test_every_unit_has_a_row_and_the_rows_form_no_cycle() -> None:
    units = {unit_of(module) for module, _ in source_files()} - {None, "__init__"}
    assert units <= set(ALLOWED), f"units without a row in ALLOWED: {units - set(ALLOWED)}"
    state: dict[str, str] = {}

    def visit(unit: str, path: tuple[str, ...]) -> None:
        assert state.get(unit) != "open", f"import cycle: {' -> '.join((*path, unit))}"
        if state.get(unit) == "done":
            return
        state[unit] = "open"
        for below in ALLOWED[unit]:
            visit(below, (*path, unit))
        state[unit] = "done"

    for unit in ALLOWED:
        visit(unit, ())


def test_each_package_imports_only_what_its_row_allows() -> None:
    outside = set()
    for module, path in source_files():
        me = unit_of(module)
        if me in (None, "__init__"):
            continue
        for name in imported_modules(path):
            other = unit_of(name)
            if other is not None and other != me and other not in ALLOWED[me]:
                outside.add(f"{path.relative_to(PACKAGE)}: {name}")
    assert not outside, f"imports against the module map: {sorted(outside)}"


def test_no_package_imports_another_packages_private_modules() -> None:
    reaches = set()
    files = [*source_files(), *(("scripts", path) for path in sorted(SCRIPTS.glob("*.py")))]
    for module, path in files:
        for name in imported_modules(path):
            private = private_part(name)
            if private is None:
                continue
            if not module.startswith("swarmfab.") or unit_of(module) != unit_of(private):
                reaches.add(f"{path}: {name}")
    assert not reaches, f"imports of another package's private modules: {sorted(reaches)}"


def test_only_the_command_line_imports_the_command_layer() -> None:
    callers = set()
    files = [*source_files(), *(("scripts", path) for path in sorted(SCRIPTS.glob("*.py")))]
    for module, path in files:
        if module.startswith("swarmfab.cli") or module == "swarmfab.__main__":
            continue
        callers.update(f"{path}: {name}" for name in imported_modules(path)
                       if name == "swarmfab.cli" or name.startswith("swarmfab.cli."))
    assert not callers, f"the command layer imported from outside it: {sorted(callers)}"


def test_files_stay_under_the_size_a_reader_takes_in_one_sitting() -> None:
    long = {f"{path.relative_to(PACKAGE)}: {n}" for _, path in source_files()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {sorted(long)}"
