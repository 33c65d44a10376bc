"""An exported champion as a PyTorch operator, from its wheel, on a host without a compiler:
``torch.ops.<package>.forward`` (fake implementations: torch.compile traces it whole),
the pool updated in place, ``forward_out`` into the caller's buffers, and packed
sequences (``cu_seqlens``) in one call."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.report.export import _pyproject, write_package
from swarmfab.report.wheel import SETUP_PY, build_wheel
from swarmfab.workloads import design_space

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to export")]

USE = """
import torch
import kda_champion as kc
from swarmfab.workloads import Case, Shape, get_workload

workload = get_workload("kda")
inputs = workload.make_inputs(Case("x", Shape(2, 40, 2, 4, 32, 32, initial_state=True)))
reference = workload.reference(inputs)
q, k, v, g, beta, h0 = (inputs[n] for n in ("q", "k", "v", "g", "beta", "initial_state"))
scale = inputs["scale"]

def error(got, name):
    return float((got.double() - reference[name]).norm() / reference[name].norm())

class Layer(torch.nn.Module):
    def forward(self, q, k, v, g, beta, h0):
        o, state = kc.forward(q, k, v, g, beta, scale=scale, initial_state=h0,
                              output_final_state=True)
        return o * 2.0, state

compiled = torch.compile(Layer(), fullgraph=True, backend="aot_eager")
o, state = compiled(q, k, v, g, beta, h0)
assert error(o / 2.0, "o") < 1e-5 and error(state, "final_state") < 1e-5

out, final = torch.empty(v.shape), torch.empty(2, 4, 32, 32)
kc.forward_out(q, k, v, g, beta, out=out, final_state=final, scale=scale, initial_state=h0)
assert error(out, "o") < 1e-5 and error(final, "final_state") < 1e-5

pool = torch.randn(5, 4, 32, 32)
before, slots = pool.clone(), torch.tensor([4, 1])
step = [x[:, :1] for x in (q, k, v, g, beta)]
kc.forward(*step, initial_state=pool, inplace_final_state=True, state_indices=slots)
assert torch.equal(pool[[0, 2, 3]], before[[0, 2, 3]]) and not torch.equal(pool[4], before[4])
packed = workload.make_inputs(Case("p", Shape(1, 46, 2, 4, 32, 32, initial_state=True,
                                              lengths=(1, 40, 5)), seed=2))
expected = workload.reference(packed)
o, state = torch.compile(lambda *x: kc.forward(*x[:5], scale=x[5], initial_state=x[6],
                                               output_final_state=True, cu_seqlens=x[7]),
                         fullgraph=True, backend="aot_eager")(
    *(packed[n] for n in ("q", "k", "v", "g", "beta", "scale", "initial_state",
                          "cu_seqlens")))
for got, name in ((o, "o"), (state, "final_state")):
    assert float((got.double() - expected[name]).norm() / expected[name].norm()) < 1e-5
assert kc.calls == {"forward": 1, "forward_pool": 1, "forward_out": 1,
                    "forward_varlen": 1}, kc.calls
print("ok", kc.__file__)
"""


class _Run:
    workload, id = "kda", "r1"


def test_the_exported_wheel_runs_as_an_operator_without_a_compiler(tmp_path: Path) -> None:
    space = design_space("kda")
    champion = space.instantiate(space.default(), threads=1)
    project = tmp_path / "export"
    write_package(project / "kda_champion", _Run(), champion)
    (project / "pyproject.toml").write_text(_pyproject("kda_champion", "kda"))
    (project / "setup.py").write_text(SETUP_PY)
    wheel = build_wheel(project)
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl"), wheel.name

    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, installed.stderr
    assert (site / "kda_champion" / "kernel.so").is_file()
    no_compiler = tmp_path / "bin"  # PATH holds nothing: no gcc, no cc
    no_compiler.mkdir()
    source = Path(__import__("swarmfab").__file__).parents[1]
    env = {"PATH": str(no_compiler), "HOME": str(tmp_path), "PYTHONPATH":
           os.pathsep.join([str(site), str(source)]), "XDG_CACHE_HOME": str(tmp_path / "c")}
    used = subprocess.run([sys.executable, "-c", USE], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)
    assert used.returncode == 0, used.stderr[-3000:]
    assert str(site) in used.stdout
    # nothing compiled at import: the wheel's library
    assert not list((tmp_path / "c").glob("kda_champion/*/kernel.so"))
