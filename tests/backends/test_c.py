"""The C backend: building the template, the build cache, diagnostics and loading.

Libraries built here are loaded into the test process itself: they are our own template
and tiny hand-written kernels, not untrusted candidates.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.backends import CBackend
from swarmfab.backends._base import SHARED_BUILDS_ENV
from swarmfab.backends.c import parse_diagnostics
from swarmfab.errors import BuildError, CandidateError
from swarmfab.kernels import DesignSpace
from swarmfab.records import Candidate
from swarmfab.verify import compare_outputs
from swarmfab.workloads import Case, KernelRefusedError
from swarmfab.workloads.delta.kda import KDA

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

KDA_SIGNATURE = (
    "int kda_forward(const float *q, const float *k, const float *v, const float *g,\n"
    "                const float *beta, const float *h0, float *o, float *ht, float scale,\n"
    "                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)"
)


def _c_candidate(source: str, name: str = "kernel.c", flags: tuple[str, ...] = ("-O1",)
                 ) -> Candidate:
    return Candidate("kda", "c", {name: source}, name, flags=flags)


def test_template_builds_and_second_build_hits_the_cache(
    tmp_path: Path, space: DesignSpace, no_shared_builds: None
) -> None:
    candidate = space.instantiate(space.default(), threads=1)
    backend = CBackend()
    first = backend.build(candidate, tmp_path / "cache")
    assert first.backend == "c"
    assert first.path.is_file()
    assert not first.cached
    second = backend.build(candidate, tmp_path / "cache")
    assert second.cached
    assert second.path == first.path
    # a different knob setting is a different candidate and a different library
    tile = space.knob("chunk")  # a knob the default template reads
    other_tile = next(value for value in tile.values if value != tile.default)
    other = space.instantiate({**space.default(), "chunk": other_tile}, threads=1)
    third = backend.build(other, tmp_path / "cache")
    assert not third.cached
    assert third.path != first.path


def _counting_compiler(tmp_path: Path) -> tuple[str, Path]:
    """gcc behind a script that logs every compilation (not ``--version``)."""
    log, script = tmp_path / "compilations.log", tmp_path / "cc"
    script.write_text(f'#!/bin/sh\ncase "$*" in *" -o "*) echo "$*" >> {log};; esac\n'
                      'exec gcc "$@"\n')
    script.chmod(0o755)
    return str(script), log


def _compilations(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_shared_build_cache_serves_every_work_directory(
    tmp_path: Path, space: DesignSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler, log = _counting_compiler(tmp_path)
    backend, candidate = CBackend(compiler), space.instantiate(space.default(), threads=1)
    monkeypatch.setenv(SHARED_BUILDS_ENV, str(tmp_path / "shared"))
    first = backend.build(candidate, tmp_path / "run-a")
    assert not first.cached and _compilations(log) == 1
    kept = tmp_path / "shared" / "c" / first.path.parent.name / "kernel.so"
    assert kept.read_bytes() == first.path.read_bytes()
    # another work directory: the library is copied in, not compiled, and it works
    second = backend.build(candidate, tmp_path / "run-b")
    assert second.cached and _compilations(log) == 1
    assert second.path.is_relative_to(tmp_path / "run-b") and not second.path.is_symlink()
    assert backend.load(second, KDA(), fill_outputs=False) is not None
    # no shared cache named: every work directory builds its own
    monkeypatch.delenv(SHARED_BUILDS_ENV)
    assert not backend.build(candidate, tmp_path / "run-c").cached
    assert _compilations(log) == 2


def test_a_shared_build_cache_that_cannot_be_written_only_stops_the_sharing(
    tmp_path: Path, space: DesignSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler, log = _counting_compiler(tmp_path)
    backend, candidate = CBackend(compiler), space.instantiate(space.default(), threads=1)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(SHARED_BUILDS_ENV, str(tmp_path / "a-file" / "shared"))
    assert not backend.build(candidate, tmp_path / "run-a").cached
    assert not backend.build(candidate, tmp_path / "run-b").cached
    assert _compilations(log) == 2


def test_a_shared_entry_without_its_library_is_not_reused(
    tmp_path: Path, space: DesignSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a build left half-copied (the library is copied last) is built again."""
    candidate = space.instantiate(space.default(), threads=1)
    monkeypatch.setenv(SHARED_BUILDS_ENV, str(tmp_path / "shared"))
    entry = tmp_path / "shared" / "c" / CBackend().cache_key(candidate)
    entry.mkdir(parents=True)
    (entry / "ptxas.txt").write_text("left over\n")
    (entry / ".kernel.so.3f2a").write_bytes(b"another process's copy in flight")
    built = CBackend().build(candidate, tmp_path / "run")
    assert not built.cached
    assert sorted(os.listdir(entry)) == [".kernel.so.3f2a", "kernel.so", "ptxas.txt"]
    # a later work directory takes the whole build, and nothing another copy left
    again = CBackend().build(candidate, tmp_path / "again")
    assert again.cached and sorted(os.listdir(again.path.parent)) == ["kernel.so", "ptxas.txt"]


def test_a_shared_build_removed_while_it_is_copied_is_built_instead(
    tmp_path: Path, space: DesignSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate = space.instantiate(space.default(), threads=1)
    monkeypatch.setenv(SHARED_BUILDS_ENV, str(tmp_path / "shared"))
    CBackend().build(candidate, tmp_path / "run-a")

    def gone(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("removed by another process")

    monkeypatch.setattr("swarmfab.backends._base.shutil.copyfile", gone)
    built = CBackend().build(candidate, tmp_path / "run-b")
    assert not built.cached and built.path.is_file()


@pytest.mark.parametrize(
    "case_name", ["tail-not-chunk-multiple", "gva-2x-k-ne-v", "gva-4x-scale-1"]
)
def test_built_template_computes_kda(
    tmp_path: Path, template: Candidate, kda: KDA, case_name: str
) -> None:
    backend = CBackend()
    forward = backend.load(backend.build(template, tmp_path), kda, fill_outputs=True)
    case = next(c for c in kda.validation_cases() if c.name == case_name)
    inputs = kda.make_inputs(case)
    checks = compare_outputs(case.name, kda.call(forward, inputs), kda.reference(inputs),
                             kda.tolerances(torch.float32))
    assert all(check.passed for check in checks), [c.detail for c in checks]


def test_kernel_refusal_raises_kernel_refused_error(
    tmp_path: Path, template: Candidate, kda: KDA
) -> None:
    backend = CBackend()
    forward = backend.load(backend.build(template, tmp_path), kda, fill_outputs=True)
    q = k = torch.rand(1, 4, 2, 8)
    v, g, beta = torch.rand(1, 4, 3, 8), -torch.rand(1, 4, 3, 8), torch.rand(1, 4, 3)
    with pytest.raises(KernelRefusedError, match="returned 1"):  # HV=3 not a multiple of H=2
        forward(q, k, v, g, beta, output_final_state=True)


def test_outputs_a_kernel_never_writes_stay_nan_when_verifying(tmp_path: Path, kda: KDA) -> None:
    lazy = "#include <stdint.h>\n" + KDA_SIGNATURE + " { return 0; }\n"
    backend = CBackend()
    artifact = backend.build(_c_candidate(lazy, "lazy.c"), tmp_path)
    inputs = kda.make_inputs(Case("x", kda.validation_cases()[0].shape))
    out = kda.call(backend.load(artifact, kda, fill_outputs=True), inputs)
    assert all(bool(value.isnan().all()) for value in out.values())
    checks = compare_outputs("x", out, kda.reference(inputs), kda.tolerances(torch.float32))
    assert not any(check.passed for check in checks)


def test_syntax_error_raises_build_error_with_structured_diagnostics(tmp_path: Path) -> None:
    source = "#include <stdint.h>\n\nint kda_forward(void) {\n    return 0\n}\n"
    with pytest.raises(BuildError) as info:
        CBackend().build(_c_candidate(source, "broken.c"), tmp_path)
    error = info.value
    errors = [d for d in error.diagnostics if d.severity in ("error", "fatal error")]
    assert errors, error.log
    first = errors[0]
    assert first.file == "broken.c"  # without the scratch directory
    assert first.line in (4, 5)
    assert first.message
    assert "broken.c" in error.log
    assert str(first) in str(error)
    assert not list((tmp_path / "c").rglob("kernel.so"))  # nothing half-built is cached


def test_missing_include_is_a_fatal_error_diagnostic(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as info:
        CBackend().build(_c_candidate('#include "nope.h"\n', "inc.c"), tmp_path)
    (diagnostic,) = [d for d in info.value.diagnostics if d.severity != "warning"]
    assert (diagnostic.file, diagnostic.line, diagnostic.severity) == ("inc.c", 1, "fatal error")
    assert "nope.h" in diagnostic.message


def test_a_source_that_claims_a_full_disk_still_fails_its_own_build(tmp_path: Path) -> None:
    """Only a file system that is nearly full makes a failed build the platform's error:
    a candidate cannot stop a run by printing the words."""
    source = "#error No space left on device\n"
    with pytest.raises(BuildError, match="No space left on device"):
        CBackend().build(_c_candidate(source, "claims.c"), tmp_path)


def test_library_without_the_entry_point_raises_candidate_error(tmp_path: Path, kda: KDA) -> None:
    backend = CBackend()
    artifact = backend.build(_c_candidate("int kda_backward(void) { return 0; }\n"), tmp_path)
    with pytest.raises(CandidateError, match="kda_forward"):
        backend.load(artifact, kda, fill_outputs=True)


def test_missing_compiler_raises_build_error(tmp_path: Path, template: Candidate) -> None:
    with pytest.raises(BuildError, match=r"cannot be run|cannot run"):
        CBackend(compiler=str(tmp_path / "no-such-cc")).build(template, tmp_path)


def test_parse_diagnostics_reads_gcc_output() -> None:
    log = (
        "/tmp/tmpab12/kda.c: In function 'kda_forward':\n"
        "/tmp/tmpab12/kda.c:12:5: error: expected ';' before '}' token\n"
        "   12 |     return 0\n"
        "      |     ^~~~~~\n"
        "kda.c:3:10: fatal error: missing.h: No such file or directory\n"
        "helper.c:40: warning: unused variable 'x' [-Wunused-variable]\n"
        "compilation terminated.\n"
    )
    diagnostics = parse_diagnostics(log)
    assert [(d.file, d.line, d.severity) for d in diagnostics] == [
        ("kda.c", 12, "error"), ("kda.c", 3, "fatal error"), ("helper.c", 40, "warning"),
    ]
    assert diagnostics[0].message == "expected ';' before '}' token"
    assert diagnostics[1].message == "missing.h: No such file or directory"
    assert str(diagnostics[0]) == "kda.c:12: error: expected ';' before '}' token"
    assert parse_diagnostics("all good\n") == ()

