"""The Python backend: syntax check at build time, `forward` required at load time."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmfab.backends import PythonBackend, backend_for_file, get_backend
from swarmfab.errors import BuildError, CandidateError
from swarmfab.records import Candidate
from swarmfab.workloads.delta.kda import KDA


def _py(source: str) -> Candidate:
    return Candidate("kda", "python", {"cand.py": source}, "cand.py")


def test_build_caches_and_load_returns_forward(tmp_path: Path, kda: KDA) -> None:
    candidate = _py("def forward(*args, **kwargs):\n    return 42\n")
    first = PythonBackend().build(candidate, tmp_path)
    assert not first.cached
    assert PythonBackend().build(candidate, tmp_path).cached
    assert PythonBackend().load(first, kda, fill_outputs=True)() == 42


def test_syntax_error_is_a_build_error_with_the_line(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"cand\.py:2"):
        PythonBackend().build(_py("x = 1\ndef forward(:\n"), tmp_path)


def test_file_without_forward_is_a_candidate_error(tmp_path: Path, kda: KDA) -> None:
    artifact = PythonBackend().build(_py("def backward():\n    pass\n"), tmp_path)
    with pytest.raises(CandidateError, match="forward"):
        PythonBackend().load(artifact, kda, fill_outputs=True)


def test_import_time_failure_is_a_candidate_error(tmp_path: Path, kda: KDA) -> None:
    artifact = PythonBackend().build(_py("raise RuntimeError('boom')\n"), tmp_path)
    with pytest.raises(CandidateError, match="boom"):
        PythonBackend().load(artifact, kda, fill_outputs=True)


def test_backend_lookup_by_name_and_suffix() -> None:
    assert get_backend("c").name == "c"
    assert backend_for_file(Path("x.py")) == "python"
    assert backend_for_file(Path("x.c")) == "c"
    assert backend_for_file(Path("x.cu")) == "cuda"
    with pytest.raises(CandidateError, match="unknown candidate format"):
        backend_for_file(Path("x.f90"))
    with pytest.raises(CandidateError, match="unknown backend"):
        get_backend("fortran")


@pytest.mark.slow  # torch.compile takes tens of seconds on a small machine
def test_the_torch_compile_backend_compiles_forward_and_may_start_processes(
    tmp_path: Path,
) -> None:
    from swarmfab.backends import TorchCompileBackend
    from swarmfab.records import Candidate
    from swarmfab.workloads import Case, Shape, get_workload

    source = (
        "from swarmfab.workloads.delta import math as delta_math\n"
        "def forward(q, k, v, g, beta, scale=None, initial_state=None,"
        " output_final_state=False):\n"
        "    o, s = delta_math.recurrent(q, k, v, g, beta, q.shape[-1] ** -0.5, initial_state)\n"
        "    return o, s\n"
    )
    backend = TorchCompileBackend()
    assert backend.needs_processes
    candidate = Candidate("kda", "torch-compile", {"c.py": source}, "c.py")
    kda = get_workload("kda")
    forward = backend.load(backend.build(candidate, tmp_path), kda, fill_outputs=True)
    inputs = kda.make_inputs(Case("x", Shape(1, 3, 1, 1, 8, 8)))
    outputs, reference = kda.call(forward, inputs), kda.reference(inputs)
    assert float((outputs["o"].double() - reference["o"]).abs().max()) < 1e-5
