"""An exported champion swapped into what users already run: transformers' Kimi Linear
(prefill and decode) and fla's KDA functions. The patched model's logits and greedy
tokens agree with the unpatched model's, the call counter proves the champion ran in
both phases, an argument it cannot honour raises, and unpatch() puts everything back."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.report.export import init_source
from swarmfab.workloads import design_space

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

TRANSFORMERS = """
import torch
import kda_champion as kc
from transformers import AutoConfig, AutoModelForCausalLM
from swarmfab.engine.tiny import TINY_CONFIG

torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(
    AutoConfig.for_model("kimi_linear", **TINY_CONFIG)).eval()
ids = torch.randint(3, 500, (2, 37))
with torch.no_grad():
    plain, plain_tokens = model(ids).logits, model.generate(ids, max_new_tokens=4,
                                                              do_sample=False)
    patched_names = kc.patch_transformers()
    patched = model(ids).logits
    after_prefill = kc.calls["forward"]
    tokens = model.generate(ids, max_new_tokens=4, do_sample=False)
    kc.unpatch()
    again = model(ids).logits
layers = len(TINY_CONFIG["linear_attn_config"]["kda_layers"])
assert len(patched_names) == 2, patched_names
assert after_prefill == layers, after_prefill  # prefill: once per KDA layer
assert kc.calls["forward"] == 2 * layers + 3 * layers, kc.calls  # generate: prefill, 3 steps
error = float((patched - plain).abs().max() / plain.abs().max())
assert error < 1e-4, error
assert torch.equal(tokens, plain_tokens)
assert torch.equal(again, plain) and kc.calls["forward"] == 5 * layers  # unpatched
print("ok", error)
"""

FLA = """
import torch
import kda_champion as kc
import fla.layers.kda  # imports the ops by name: those are patched too
import fla.ops.kda as ops
from swarmfab.workloads import Case, Shape, get_workload

original = ops.chunk_kda
workload = get_workload("kda")
inputs = workload.make_inputs(Case("x", Shape(2, 40, 2, 2, 32, 32, initial_state=True)))
reference = workload.reference(inputs)
args = [inputs[n] for n in ("q", "k", "v", "g", "beta")]
patched = kc.patch_fla()
assert "fla.layers.kda.chunk_kda" in patched and "fla.ops.kda.fused_recurrent_kda" in patched
for function in (ops.chunk_kda, fla.layers.kda.fused_recurrent_kda):
    o, state = function(*args, scale=inputs["scale"], initial_state=inputs["initial_state"],
                        output_final_state=True)
    assert float((o.double() - reference["o"]).norm() / reference["o"].norm()) < 1e-5
try:
    ops.chunk_kda(*args, use_gate_in_kernel=True)
except ValueError as refused:
    assert "use_gate_in_kernel" in str(refused)
else:
    raise AssertionError("an option the champion cannot honour was ignored")
assert kc.calls["forward"] == 2, kc.calls
kc.unpatch()
assert ops.chunk_kda is original
print("ok")
"""


class _Run:
    workload, id = "kda", "r1"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("patches")
    space = design_space("kda")
    champion = space.instantiate(space.default(), threads=1)
    directory = root / "kda_champion"
    directory.mkdir()
    (directory / champion.entry).write_text(champion.sources[champion.entry])
    (directory / "__init__.py").write_text(init_source("kda_champion", _Run(), champion, []))
    return root


def _run(code: str, package: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(package), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "XDG_CACHE_HOME": str(package / "cache")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=package, timeout=600, check=False)


def test_transformers_kimi_linear_runs_the_champion_in_prefill_and_decode(
    package: Path
) -> None:
    pytest.importorskip("transformers")
    done = _run(TRANSFORMERS, package)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


@pytest.mark.skipif(importlib.util.find_spec("fla") is None,
                    reason="fla (flash-linear-attention) is not installed")
def test_fla_functions_run_the_champion_and_refuse_what_it_cannot_honour(
    package: Path
) -> None:
    done = _run(FLA, package)
    assert done.returncode == 0, done.stderr[-3000:]
