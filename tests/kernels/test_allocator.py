"""The module design space's ``allocator`` knob: offered where malloc is glibc's, started
from what this host's probe finds, and doing what it says (no page faults once warm)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.backends import get_backend
from swarmfab.kernels.allocator import glibc_malloc
from swarmfab.workloads import Shape, design_space

pytestmark = pytest.mark.skipif(not glibc_malloc(), reason="the C library is not glibc")

# one 40 MiB output per call: above glibc's largest mmap threshold (32 MiB), so as the
# system sets malloc every call maps (and faults in) fresh pages
PROBLEM = '''
import torch
import torch.nn as nn

size = 10485760


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.ones(size)]


def get_init_inputs():
    return []
'''

COUNT_FAULTS = '''
import resource, sys
import torch
namespace = {}
exec(compile(open(sys.argv[1]).read(), "model_new.py", "exec"), namespace)
model, (x,) = namespace["ModelNew"](), namespace["get_inputs"]()
for _ in range(20):  # the heap grows to what the calls need
    model(x)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    out = model(x)
    del out
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
'''


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    path = tmp_path / "double.py"
    path.write_text(PROBLEM)
    return path


def test_the_allocator_starts_from_what_the_probe_found(
        problem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for costly, default in ((True, "retain"), (False, "system")):
        monkeypatch.setattr("swarmfab.kernels.module.faults_are_costly", lambda c=costly: c)
        space = design_space(str(problem))
        assert space.knob("allocator").values == ("system", "retain")
        assert space.default()["allocator"] == default


def test_retaining_is_rendered_only_when_chosen_and_says_it_is_process_wide(
        problem: Path) -> None:
    space = design_space(str(problem))
    for value, rendered in (("retain", True), ("system", False)):
        candidate = space.instantiate({**space.default(), "allocator": value}, threads=2)
        source = candidate.sources[candidate.entry]
        assert ("_retain_freed_memory()" in source) is rendered
        assert ("PROCESS-WIDE" in source) is rendered


@pytest.mark.slow  # two sandboxed sessions per engine, one compiling: 6-18 s
@pytest.mark.parametrize("engine", ["eager", "inductor"])
def test_a_retaining_model_new_runs_without_page_faults_once_warm(
        problem: Path, tmp_path: Path, engine: str) -> None:
    space = design_space(str(problem))
    faults = {}
    for value in ("system", "retain"):
        setting = {**space.default(), "engine": engine, "allocator": value}
        candidate = space.instantiate(setting, threads=1)
        file = tmp_path / f"{engine}-{value}.py"
        file.write_text(candidate.sources[candidate.entry])
        done = subprocess.run([sys.executable, "-c", COUNT_FAULTS, str(file)],
                              capture_output=True, text=True, timeout=300, check=True)
        faults[value] = float(done.stdout.split()[-1])
    pages = 40 * 2**20 / 4096
    assert faults["system"] > 0.5 * pages, faults  # fresh pages for every output
    assert faults["retain"] < 0.01 * pages, faults  # the pages of the last one


# the gated delta rule's C kernel through fla's API in a timing session's process (malloc's
# thresholds fixed), at the shape argv[2:] gives
COUNT_KERNEL_FAULTS = '''
import resource, sys
from pathlib import Path
import torch
from swarmfab.backends import Artifact, get_backend
from swarmfab.kernels.allocator import fix_malloc_thresholds
from swarmfab.workloads import Case, Shape, get_workload
fix_malloc_thresholds()
torch.set_num_threads(1)
kda = get_workload("kda")
forward = get_backend("c").load(Artifact("c", Path(sys.argv[1])), kda, fill_outputs=False)
inputs = kda.make_inputs(Case("x", Shape(*(int(n) for n in sys.argv[2:])), seed=0))
for _ in range(5):
    kda.call(forward, inputs)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    kda.call(forward, inputs)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
'''


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize(("shape", "afresh"), [
    pytest.param(Shape(1, 512, 1, 16, 16, 1024), True,  # o: 32 MiB, the mmap threshold
                 marks=pytest.mark.slow),  # 9 s: the other two stay in make test-fast
    (Shape(1, 480, 1, 16, 16, 1024), False),  # o: 30 MiB, the final state 1 MiB
    (Shape(1, 16, 1, 16, 16, 15360), False),  # o and the final state 15 MiB each
], ids=["32MiB", "31MiB", "2x15MiB"])
def test_a_retaining_delta_kernel_makes_fresh_outputs_fault_free_once_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: Shape, afresh: bool) -> None:
    monkeypatch.setattr("swarmfab.kernels.delta.faults_are_costly", lambda: True)
    space = design_space("kda")
    assert space.knob("allocator").values == ("system", "retain")
    assert space.default()["allocator"] == "system"  # never process-wide unless chosen
    assert [move for move, _ in space.starting if "allocator" in move] == [
        {"allocator": "retain"}]
    faults, settings = {}, {}
    for value in ("system", "retain"):
        settings[value] = setting = {**space.default(), "algorithm": "recurrent",
                                     "allocator": value}
        candidate = space.instantiate(setting, threads=1)
        source = candidate.sources[candidate.entry]
        assert "PROCESS-WIDE" in source  # the template says what the knob does, always
        assert ("#define DELTA_RETAIN_FREED_MEMORY 1" in source) is (value == "retain")
        artifact = get_backend("c").build(candidate, tmp_path / "cache")
        fields = (shape.B, shape.T, shape.H, shape.HV, shape.K, shape.V)
        done = subprocess.run([sys.executable, "-c", COUNT_KERNEL_FAULTS, str(artifact.path),
                               *map(str, fields)],
                              capture_output=True, text=True, timeout=300, check=True)
        faults[value] = float(done.stdout.split()[-1])
    pages = 4 * shape.T * shape.HV * shape.V / 4096  # o's
    assert faults["retain"] < 0.01 * pages, faults
    # the space declares the knob inert exactly where the system's malloc is fault-free
    # too: there the gate leaves the shape out (a reading between two processes)
    inert = space.same_code_on(settings["system"], settings["retain"], shape)
    if afresh:  # at the mmap threshold: mapped afresh on every call
        assert faults["system"] > 0.5 * pages, faults
        assert not inert
    else:
        assert faults["system"] < 0.01 * pages, faults
        assert inert
