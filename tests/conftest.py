"""Shared fixtures: the KDA workload, its design space and small file helpers.

Tests never touch the user's ``.swarmfab`` directory: every cache, store and champion
goes under pytest's ``tmp_path``. Torch in the test process runs on one thread: the
tensors here are tiny, and on a busy machine OpenMP threads spinning against other
processes make them tens of times slower. (Sandboxed jobs set their own thread count.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from swarmfab.kernels import DesignSpace, design_space
from swarmfab.records import Candidate
from swarmfab.workloads.kda import KDA

torch.set_num_threads(1)

@pytest.fixture
def kda() -> KDA:
    return KDA()


@pytest.fixture
def space() -> DesignSpace:
    return design_space("kda")


@pytest.fixture
def template(space: DesignSpace) -> Candidate:
    """The C template at its default knobs, rendered for one thread."""
    return space.instantiate(space.default(), threads=1)


@pytest.fixture
def template_source(template: Candidate) -> str:
    return template.sources[template.entry]


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path / name`` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write
