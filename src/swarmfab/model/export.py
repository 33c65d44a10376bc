"""A study's crowned parts written out, with one function that puts them in a model.

``<out>/patched/`` holds each crowned part's champion file (the problem and its
``ModelNew``), each workload part's exported operator package, and ``apply.py``:
``apply(model)`` swaps every instance of each part for its champion (loaded with the
instance's own weights) and patches the operators in, and returns the
:class:`~swarmfab.model.Patched` that did it (``.__exit__()`` puts the model back).
Only the parts that passed the end-to-end check are written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["APPLY", "write_patched"]

APPLY = '''"""The parts swarmfab model crowned for {target}, checked end to end:
apply(model) puts them in place (see PARTS and OPERATORS below)."""

import importlib
import json
import sys
from pathlib import Path

from swarmfab.model import Patched

HERE = Path(__file__).parent
PARTS = json.loads((HERE / "parts.json").read_text())


def apply(model):
    """Every crowned part into ``model`` (a model of the same architecture): returns
    the Patched object, already applied; its __exit__() undoes it."""
    patched = Patched(model)
    for part in PARTS:
        if part["champion_file"]:
            source = (HERE / part["champion_file"]).read_text()
            patched.add(source, [(path, model.get_submodule(path)) for path in part["paths"]])
        else:
            sys.path.insert(0, str(HERE))
            package = importlib.import_module(part["package"])
            patched.add_operator_package(package)
    return patched.__enter__()
'''


def write_patched(directory: Path, target: str, parts: list[dict[str, Any]]) -> Path:
    """``directory`` with ``apply.py``, ``parts.json`` and each part's champion file or
    operator package. ``parts``: dicts with ``paths``, ``champion_source`` (a ModelNew
    file) or ``package`` (an operator package's directory), and ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    listed = []
    for part in parts:
        entry = {"name": part["name"], "paths": part["paths"], "champion_file": None,
                 "package": None}
        if part.get("champion_source"):
            entry["champion_file"] = f"{part['name']}.py"
            (directory / entry["champion_file"]).write_text(part["champion_source"])
        else:
            package = Path(part["package"])
            shutil.copytree(package, directory / package.name, dirs_exist_ok=True)
            entry["package"] = package.name
        listed.append(entry)
    (directory / "parts.json").write_text(json.dumps(listed, indent=2))
    (directory / "apply.py").write_text(APPLY.format(target=target))
    return directory / "apply.py"
