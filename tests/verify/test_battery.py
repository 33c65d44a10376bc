"""The battery's parts, without a sandbox: its cases, the layouts and values they ask
for, the problem workload's weights and costs. (Verdicts through the command line are in
tests/redteam/.)"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from swarmfab.evaluation._battery import Battery
from swarmfab.verify import probes
from swarmfab.workloads import Case, Distribution, Shape, get_workload
from swarmfab.workloads.problem import ProblemWorkload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


def test_the_delta_battery_reaches_what_real_use_does() -> None:
    cases = get_workload("kda").battery_cases(threads=2)
    shapes = [case.shape for case in cases if isinstance(case.shape, Shape)]
    assert all(shape.K == shape.V == 128 for shape in shapes)
    assert any(s.T >= 1024 and s.B * s.HV >= 64 and s.HV > s.H for s in shapes)
    assert max(s.B * s.HV for s in shapes if s.T == 1 and s.pool) >= 256
    gates = {case.distribution.gate_fill for case in cases}
    assert {"0", "-100", "-inf"} <= gates
    assert {0.0, 1.0} <= {case.distribution.beta_fill for case in cases}
    assert {"strided", "transposed"} <= {case.layout for case in cases}
    assert {1, 2} <= {case.threads for case in cases}


def test_a_test_sized_battery_keeps_every_property_but_the_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from swarmfab.workloads.delta.battery import BATTERY_ENV

    full = get_workload("kda").battery_cases(threads=2)
    monkeypatch.setenv(BATTERY_ENV, "test")
    sized = get_workload("kda").battery_cases(threads=2)
    changed = [(a, b) for a, b in zip(full, sized, strict=True) if a != b]
    # the prefill, the decode batch, the gates of 0 and the packed sequences; no other
    assert [a.name.split(",")[0].split(" over")[0] for a, _ in changed] == [
        "battery: prefill B4 T1024 H4/HV16 K128", "battery: decode in place",
        "battery: gates exactly 0", "battery: packed"]
    for case, small in changed:
        assert "test-sized" in small.name and "test-sized" not in case.name
        assert small.seed == case.seed and small.distribution == case.distribution
        assert (small.layout, small.threads, small.dtype) == (case.layout, case.threads,
                                                              case.dtype)
    long = [(a.shape, b.shape) for a, b in changed if a.shape.T > 1]
    for shape, small_shape in long:  # the longest sequence shorter, past the tiles of 64
        tokens, small_tokens = (max(s.lengths, default=s.T) for s in (shape, small_shape))
        assert 128 < small_tokens < tokens  # and 128
        # the packed case: the same short sequences before it
        assert small_shape.lengths[:-1] == shape.lengths[:-1]
        assert dataclasses.replace(small_shape, T=shape.T, lengths=shape.lengths) == shape
    prefill = long[0][1]
    assert prefill.B * prefill.HV >= 64 and prefill.HV > prefill.H  # pairs, grouped values
    [(decode, small_decode)] = [(a.shape, b.shape) for a, b in changed if a.shape.T == 1]
    # fewer pairs, still in place at shuffled slots of a larger pool, past 64 pairs
    assert small_decode.B * small_decode.HV >= 64 and small_decode.pool > small_decode.B
    assert dataclasses.replace(small_decode, B=decode.B, pool=decode.pool) == decode


def test_extreme_gates_and_betas_are_drawn_as_asked() -> None:
    kda = get_workload("kda")
    shape = Shape(1, 40, 1, 2, 8, 8)
    inputs = kda.make_inputs(Case("x", shape, Distribution(gate_fill="-inf",
                                                           gate_fill_prob=0.5), seed=3))
    g = inputs["g"]
    assert isinstance(g, torch.Tensor)
    share = float(torch.isneginf(g).float().mean())
    assert 0.3 < share < 0.7 and not torch.isnan(g).any()
    beta = kda.make_inputs(Case("b", shape, Distribution(beta_fill=1.0)))["beta"]
    assert isinstance(beta, torch.Tensor) and bool((beta == 1.0).all())
    reference = kda.reference(inputs)
    assert all(bool(torch.isfinite(value).all()) for value in reference.values())


def test_the_chunked_form_answers_an_infinite_gate() -> None:
    kda = get_workload("kda")
    case = Case("inf", Shape(2, 150, 1, 2, 32, 32, True),
                Distribution(gate_fill="-inf", gate_fill_prob=0.1), seed=5)
    inputs = kda.make_inputs(case)
    exact, chunked = kda.reference(inputs), kda.reference_chunked(inputs)
    for name, value in exact.items():
        assert torch.allclose(chunked[name], value, rtol=1e-9, atol=1e-9), name


@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_a_layout_keeps_the_values_and_changes_the_memory(layout: str) -> None:
    x, v = torch.randn(2, 3, 5), torch.randn(7)
    laid = probes.laid_out({"x": x, "v": v, "pool": x.clone(), "scale": 0.5}, layout,
                           keep=frozenset({"pool"}))
    for name in ("x", "v"):
        value = laid[name]
        assert isinstance(value, torch.Tensor)
        assert torch.equal(value, {"x": x, "v": v}[name])
    moved = laid["x"]
    assert isinstance(moved, torch.Tensor) and not moved.is_contiguous()
    assert laid["pool"].is_contiguous() and laid["scale"] == 0.5  # type: ignore[union-attr]


def test_only_exact_tensors_count_as_plain() -> None:
    class Sub(torch.Tensor):
        pass

    plain = torch.zeros(3)
    assert probes.not_plain_tensors({"o": plain}) == ()
    assert probes.not_plain_tensors({"o": plain.as_subclass(Sub), "s": plain}) == ("o (Sub)",)


def test_layout_and_threads_survive_the_store() -> None:
    case = Case("c", Shape(1, 2, 1, 1, 4, 4), Distribution(gate_fill="-inf", beta_fill=0.0),
                seed=4, layout="transposed", threads=1)
    assert Case.from_dict(case.to_dict()) == case
    assert case.twin().layout == "transposed" and case.twin().threads == 1
    with pytest.raises(ValueError, match="layout"):
        Case("c", case.shape, layout="diagonal")


@pytest.fixture(scope="module")
def gemm() -> ProblemWorkload:
    workload = get_workload(str(EXAMPLES / "02_gemm_bias_gelu.py"))
    assert isinstance(workload, ProblemWorkload)
    return workload


def test_a_problem_file_gets_flops_and_bytes_from_the_meta_device(
    gemm: ProblemWorkload
) -> None:
    shape = gemm.default_shapes[0]
    flops = 2 * 256 * 1024 * 2048  # the matrix product; the counter leaves out the rest
    assert gemm.flops(shape) == pytest.approx(flops)
    weights_inputs_outputs = 2048 * 1024 + 2048 + 256 * 1024 + 256 * 2048
    assert gemm.min_bytes(shape) == pytest.approx(4 * weights_inputs_outputs)


def test_problem_inputs_scaled_and_zeroed(gemm: ProblemWorkload) -> None:
    small = gemm.validation_cases()[0]
    plain = gemm.make_inputs(small)["arg0"]
    scaled = gemm.make_inputs(Case("s", small.shape, Distribution(input_scale=1e3),
                                   seed=small.seed))["arg0"]
    zeroed = gemm.make_inputs(Case("z", small.shape, Distribution(zero_prob=0.5),
                                   seed=small.seed))["arg0"]
    assert isinstance(plain, torch.Tensor) and isinstance(scaled, torch.Tensor)
    assert torch.allclose(scaled, plain * 1e3)
    assert isinstance(zeroed, torch.Tensor)
    assert 0.4 < float((zeroed == 0).float().mean()) < 0.6


def test_a_live_module_gets_other_weights_and_its_own_changes_are_seen(
    gemm: ProblemWorkload
) -> None:
    small = gemm.validation_cases()[0]

    class Folding(torch.nn.Module):  # folds on its first call, then trusts the fold
        def __init__(self, in_features: int, out_features: int):
            super().__init__()
            self.linear = torch.nn.Linear(in_features, out_features, bias=False)
            self.bias = torch.nn.Parameter(torch.zeros(out_features))
            self.folded = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.folded:
                with torch.no_grad():
                    self.bias.mul_(2.0)
                self.folded = True
            return self.linear(x) + self.bias / 2.0

    first = gemm.make_inputs(small)
    gemm.call(Folding, first)
    assert gemm.changed_state(Folding, first) == ("bias",)
    other = gemm.make_inputs(Case("other weights", small.shape, seed=small.seed + 1))
    module = gemm.instance(Folding, other["module"])  # type: ignore[arg-type]
    assert gemm.changed_state(Folding, other) == ()  # its weights were loaded again
    given = other["module"].weights["bias"]  # type: ignore[union-attr]
    assert torch.equal(module.bias.detach(), given)


def test_a_value_case_the_files_own_model_fails_is_left_out(tmp_path: Path) -> None:
    source = (EXAMPLES / "10_softmax_temperature.py").read_text().replace(
        "torch.softmax(logits / self.temperature, dim=-1)",
        "torch.exp(logits / self.temperature) / torch.exp(logits / self.temperature)"
        ".sum(-1, keepdim=True)")
    path = tmp_path / "naive_softmax.py"
    path.write_text(source)
    workload = get_workload(str(path))
    battery = Battery(workload, 1, "float32", workload.tolerances(torch.float32))
    names = [case.name for case in battery.cases()]
    left = dict(battery.left_out)
    assert "battery: inputs scaled by 1000" in left and "non-finite" in left[
        "battery: inputs scaled by 1000"]
    assert "battery: inputs scaled by 1000" not in names
    assert "battery: half the inputs exactly 0" in names
    assert math.isclose(len(names) + len(left), len(workload.battery_cases(1)))


def test_weights_as_training_leaves_them_catch_what_the_initial_ones_hide() -> None:
    """LayerNorm starts at ones and zeros: a module that answers an all-zero row with
    zeros (not the bias) matches the reference there, and only moved weights show it."""
    workload = get_workload(str(EXAMPLES / "07_layernorm.py"))
    assert isinstance(workload, ProblemWorkload)
    cases = workload.battery_cases(1)
    assert all(case.distribution.weight_noise > 0 for case in cases)
    trained = cases[-1]
    small = workload.validation_cases()[0]
    initial = workload.make_inputs(small)["module"]  # the weights ride with the inputs
    weights = workload.make_inputs(trained)["module"].weights
    assert not torch.equal(weights["norm.bias"], torch.zeros_like(weights["norm.bias"]))
    assert not torch.equal(weights["norm.weight"], initial.weights["norm.weight"])

    class ZeroRows(workload.namespace(small.shape)["Model"]):  # type: ignore[misc]
        def forward(self, x):
            out = super().forward(x)
            return torch.where((x == 0).all(-1, keepdim=True), torch.zeros_like(out), out)

    zeros = Case("zeros", trained.shape, dataclasses.replace(trained.distribution,
                                                              zero_prob=1.0), seed=3)
    for case, caught in ((dataclasses.replace(zeros, distribution=Distribution(zero_prob=1.0)),
                          False), (zeros, True)):
        inputs = workload.make_inputs(case)
        got = workload.call(ZeroRows, inputs)["out"]
        want = workload.reference(inputs)["out"].to(got.dtype)
        assert torch.allclose(got, want, atol=1e-5) is not caught, case.distribution
