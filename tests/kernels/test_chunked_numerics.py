"""The chunked template's factored products stay exact at the edge of float32's range.

Inside a block of 16 rows the template factors exp(G_i - G_j) as exp(G_i - G_a) times
exp(G_a - G_j) where the block's decay span allows it. An input times the small factor
must stay a normal float: under -ffast-math a subnormal is flushed to zero, and a query
component lost that way drops out of the diagonal term q_i . k_i. Here every block decays
by just under the largest span the factored form was ever allowed (80), and the query's
weight sits in components of 1e-3, so a template that factors such a block loses most
of each diagonal term.

The library is built with the template's default flags (-ffast-math) and run in a child
process: loading it sets flush-to-zero for the whole process, which would change the
float64 references of every later test in this one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmfab.backends.c import CBackend
from swarmfab.workloads import design_space, get_workload

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SPAN = 79.5  # decay across each block of 16 tokens
T, K = 48, 16

_CHILD = """
import json, sys, torch
from swarmfab.backends import Artifact
from swarmfab.backends.c import CBackend
from swarmfab.verify import compare_outputs
from swarmfab.workloads import get_workload
workload = get_workload(sys.argv[1])
inputs = torch.load(sys.argv[3])
reference = workload.reference(inputs)["o"]  # before the library sets FTZ/DAZ
forward = CBackend().load(Artifact("c", sys.argv[2]), workload, fill_outputs=True)
o = workload.call(forward, inputs)["o"]
(check,) = compare_outputs("block", {"o": o}, {"o": reference},
                           workload.tolerances(torch.float32))
print(json.dumps({"rms": check.rms_ratio, "max_abs": check.max_abs_ratio,
                  "detail": check.detail}))
"""


def _inputs(scalar_gate: bool) -> dict[str, torch.Tensor | float | None]:
    gen = torch.Generator().manual_seed(0)
    # the query's weight in 12 components of 1e-3 (the key's large ones), 4 large ones
    # where the key is small: q . k is mostly the small components' sum
    q = torch.full((1, T, 1, K), 1e-3)
    q[..., :4] = 0.5
    k = torch.full((1, T, 1, K), 0.28)
    k[..., :4] = 1e-3
    k = k * (1 + 0.1 * torch.rand(k.shape, generator=gen))
    v = torch.rand(1, T, 1, K, generator=gen)
    step = torch.full((1, T, 1), -SPAN / 16)  # each block spans SPAN from its anchor
    g = step if scalar_gate else step[..., None].expand(1, T, 1, K).contiguous()
    beta = torch.full((1, T, 1), 0.5)
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": None,
            "scale": K**-0.5}


@pytest.mark.parametrize("workload", ["gdn", "kda"])
def test_a_block_decaying_near_the_float32_range_keeps_small_query_components(
    workload: str, tmp_path: Path
) -> None:
    space = design_space(workload)
    candidate = space.instantiate({**space.default(), "algorithm": "chunked"}, threads=1)
    assert "-ffast-math" in candidate.flags  # the setting that flushes subnormals
    artifact = CBackend().build(candidate, tmp_path / "build")
    inputs = tmp_path / "inputs.pt"
    torch.save(_inputs(scalar_gate=workload == "gdn"), inputs)
    child = subprocess.run([sys.executable, "-c", _CHILD, workload, str(artifact.path),
                            str(inputs)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    errors = json.loads(child.stdout)
    assert errors["rms"] is not None, errors["detail"]  # finite, the right shape and dtype
    tolerances = get_workload(workload).tolerances(torch.float32)
    assert errors["rms"] < tolerances.rms_ratio / 10, errors
    assert errors["max_abs"] < tolerances.max_abs_ratio / 10, errors
