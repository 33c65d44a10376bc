"""ggml's fused gated delta rule (swarmfab.workloads.delta.ggml) against the float64 reference.

Skipped where no ggml with the op can be loaded (scripts/build_ggml.sh builds one;
``pip install libggml-python`` ships one).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from swarmfab.workloads import Case, Distribution, Shape, get_workload
from swarmfab.workloads.delta import ggml

pytestmark = pytest.mark.skipif(ggml.available() is not None,
                                reason=f"ggml is not usable here: {ggml.available()}")

TOLERANCE = 1e-4
CASES = [
    Case("prefill-with-state", Shape(2, 37, 2, 2, 32, 32, initial_state=True), seed=1),
    Case("no-state", Shape(1, 20, 1, 1, 16, 16), seed=2),
    Case("decode-in-place-pool", Shape(3, 1, 2, 2, 32, 32, True, pool=7), seed=3),
    Case("gva-2x", Shape(2, 24, 2, 4, 16, 16, initial_state=True), seed=4),
    Case("scale-1", Shape(1, 30, 2, 2, 16, 16, initial_state=True), Distribution(scale=1.0),
         seed=5),
    Case("prefill-pool-gva-scale", Shape(2, 9, 1, 2, 16, 16, True, pool=5),
         Distribution(scale=0.3), seed=6),
]


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).norm() / expected.norm())


@pytest.fixture(scope="module")
def net() -> ggml.GatedDeltaNet:
    return ggml.GatedDeltaNet(threads=2)


def test_describe_names_a_usable_build() -> None:
    facts = ggml.describe()
    major, minor = (int(x) for x in facts["version"].split(".")[:2])
    assert (major, minor) >= ggml.MIN_VERSION
    assert facts["path"] and isinstance(facts["features"], list)


@pytest.mark.parametrize("workload", ["kda", "gdn"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_matches_the_reference(net: ggml.GatedDeltaNet, workload: str,
                                       case: Case) -> None:
    w = get_workload(workload)
    inputs = w.make_inputs(case)
    expected = w.reference(inputs)  # before the call: a pool is updated in place
    actual = w.call(net.forward, inputs)
    for name in ("o", "final_state"):
        assert _relative(actual[name], expected[name]) < TOLERANCE, name
    if case.shape.pool:
        assert actual["final_state"] is inputs["initial_state"]


def test_copies_where_the_tensor_struct_is_not_verified(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lib = dataclasses.replace(ggml._load(), zero_copy=False)
    monkeypatch.setattr(ggml, "_load", lambda: lib)
    w = get_workload("kda")
    inputs = w.make_inputs(CASES[0])
    expected = w.reference(inputs)
    actual = w.call(ggml.GatedDeltaNet(threads=1).forward, inputs)
    for name in ("o", "final_state"):
        assert _relative(actual[name], expected[name]) < TOLERANCE, name


def test_k_other_than_v_is_refused(net: ggml.GatedDeltaNet) -> None:
    w = get_workload("kda")
    inputs = w.make_inputs(Case("k-ne-v", Shape(1, 4, 1, 1, 16, 32)))
    with pytest.raises(ValueError, match="K == V"):
        w.call(net.forward, inputs)


def test_shapes_ggml_would_abort_on_are_refused(net: ggml.GatedDeltaNet) -> None:
    w = get_workload("kda")
    inputs = w.make_inputs(Case("state", Shape(2, 4, 1, 1, 16, 16, initial_state=True)))
    q, k, v, g, beta = (inputs[n] for n in ("q", "k", "v", "g", "beta"))
    with pytest.raises(ValueError, match="g must be"):
        net.forward(q, k, v, g[..., :8], beta)
    with pytest.raises(ValueError, match="initial_state must be"):
        net.forward(q, k, v, g, beta, initial_state=inputs["initial_state"][:1])


@pytest.mark.parametrize("zero_copy", [True, False])
@pytest.mark.parametrize("workload", ["kda", "gdn"])
def test_native_steps_update_the_pool_in_place(
        monkeypatch: pytest.MonkeyPatch, workload: str, zero_copy: bool) -> None:
    lib = dataclasses.replace(ggml._load(), zero_copy=zero_copy)
    monkeypatch.setattr(ggml, "_load", lambda: lib)
    w = get_workload(workload)
    shape = Shape(3, 1, 2, 2, 32, 32, True, pool=7)
    first = w.make_inputs(Case("step", shape))
    slots, pool = first["state_indices"], first["initial_state"]
    step = None
    for seed in range(4):  # each step's tokens are new; the states carry on
        inputs = {**w.make_inputs(Case("step", shape, seed=seed)),
                  "initial_state": pool, "state_indices": slots}
        expected = w.reference(inputs)
        tensors = [inputs[n] for n in ("q", "k", "v", "g", "beta")]
        if step is None:
            step = ggml.GatedDeltaNet(threads=2).native(*tensors, slots=7, state_indices=slots)
            step.pool.copy_(step.pool_from(pool))
        else:
            step.bind(*tensors)
        o = step()
        assert _relative(o, expected["o"]) < TOLERANCE
        assert _relative(step.pool_as_fla(), expected["final_state"]) < TOLERANCE
        pool = expected["final_state"].float()


def test_an_old_ggml_is_named() -> None:
    with pytest.raises(ggml.GgmlUnavailable, match=r"ggml 0\.12\.0 .* >= 0\.15"):
        ggml.check_version("0.12.0", "/somewhere")


def test_ggml_is_an_opt_in_baseline_timed_in_the_sandbox(tmp_path: object) -> None:
    """Named with --baseline it is timed like any baseline, in the sandboxed worker."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from swarmfab.cli import app

    kda = get_workload("kda")
    assert "ggml" in kda.baselines() and "ggml" not in kda.default_baselines()
    workdir = Path(str(tmp_path))
    result = CliRunner().invoke(app, [
        "bench", "kda", "--candidate", "default", "--shape", "2,16,2,16,16+pool4",
        "--baseline", "ggml", "--threads", "1", "--json", "--workdir", str(workdir),
        "--db", str(workdir / "store.db")])
    assert result.exit_code == 0, result.output
    [shape] = json.loads(result.output)
    assert shape["shape"] == "B2 T16 H2 K16 V16 +pool4"
    assert set(shape["seconds"]) == {"candidate", "ggml"}
    assert shape["seconds"]["ggml"]["median"] > 0
