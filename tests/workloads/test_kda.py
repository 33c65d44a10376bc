"""KDA workload: the float64 reference, its independent cross-check, baselines, inputs, cost."""

from __future__ import annotations

import pytest
import torch

from swarmfab.verify import compare_outputs
from swarmfab.workloads import Case, Distribution, KernelRefusedError, Shape, get_workload
from swarmfab.workloads.delta.kda import KDA

CASES = KDA().validation_cases()
CASE_IDS = [case.name for case in CASES]


def _rms_ratio(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).square().mean().sqrt() / expected.square().mean().sqrt())


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_recurrent_reference_agrees_with_independent_chunked_form(
    kda: KDA, case: Case, chunk: int
) -> None:
    inputs = kda.make_inputs(case)
    recurrent = kda.reference(inputs)
    chunked = kda.reference_chunked(inputs, chunk=chunk)
    assert set(recurrent) == set(chunked) == {"o", "final_state"}
    for name in ("o", "final_state"):
        assert recurrent[name].dtype == torch.float64
        assert chunked[name].shape == recurrent[name].shape
        assert _rms_ratio(chunked[name], recurrent[name]) < 1e-12, name


# ggml (where its libraries are) takes K == V only: tests/workloads/test_ggml.py
@pytest.mark.parametrize("baseline", sorted(set(KDA().baselines()) - {"ggml"}))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_float32_baselines_pass_verification(kda: KDA, case: Case, baseline: str) -> None:
    inputs = kda.make_inputs(case)
    reference = kda.reference(inputs)  # before the call: a pool is updated in place
    outputs = kda.call(kda.baselines()[baseline], inputs)
    assert all(value.dtype == torch.float32 for value in outputs.values())
    checks = compare_outputs(case.name, outputs, reference, kda.tolerances(torch.float32))
    assert [check.passed for check in checks] == [True, True], [c.detail for c in checks]


def test_strong_decay_chunked_baseline_stays_finite_where_naive_factorisation_overflows(
    kda: KDA,
) -> None:
    case = Case("strong", Shape(1, 128, 1, 1, 32, 32), Distribution(gate_divisor=0.1), seed=11)
    inputs = kda.make_inputs(case)
    g = inputs["g"]
    assert isinstance(g, torch.Tensor)
    # exp(-G) over one 64-token chunk, as a naive exp(G_i) * exp(-G_j) split needs, overflows
    naive = torch.exp(-g[:, :64].float().sum(dim=1))
    assert not bool(torch.isfinite(naive).all())

    outputs = kda.call(kda.baselines()["torch-chunked"], inputs)
    assert all(bool(torch.isfinite(value).all()) for value in outputs.values())
    checks = compare_outputs(case.name, outputs, kda.reference(inputs),
                             kda.tolerances(torch.float32))
    assert all(check.passed for check in checks), [c.detail for c in checks]


def test_make_inputs_is_deterministic_per_seed_and_differs_across_seeds(kda: KDA) -> None:
    shape = Shape(1, 9, 2, 2, 8, 8, initial_state=True)
    first = kda.make_inputs(Case("a", shape, seed=3))
    again = kda.make_inputs(Case("b", shape, seed=3))
    other = kda.make_inputs(Case("a", shape, seed=4))
    tensors = [name for name, value in first.items() if isinstance(value, torch.Tensor)]
    assert set(tensors) == {"q", "k", "v", "g", "beta", "initial_state"}
    for name in tensors:
        assert torch.equal(first[name], again[name]), name  # type: ignore[arg-type]
        assert not torch.equal(first[name], other[name]), name  # type: ignore[arg-type]
    assert first["scale"] == pytest.approx(8**-0.5)


def test_make_inputs_shapes_dtypes_and_value_ranges(kda: KDA) -> None:
    shape = Shape(2, 5, 2, 4, 8, 6)
    inputs = kda.make_inputs(Case("x", shape, seed=0))
    assert inputs["q"].shape == (2, 5, 2, 8)  # type: ignore[union-attr]
    assert inputs["k"].shape == (2, 5, 2, 8)  # type: ignore[union-attr]
    assert inputs["v"].shape == (2, 5, 4, 6)  # type: ignore[union-attr]
    assert inputs["g"].shape == (2, 5, 4, 8)  # type: ignore[union-attr]
    assert inputs["beta"].shape == (2, 5, 4)  # type: ignore[union-attr]
    assert inputs["initial_state"] is None
    for name in ("q", "k", "v", "g", "beta"):
        assert inputs[name].dtype == torch.float32, name  # type: ignore[union-attr]
    q, g, beta = inputs["q"], inputs["g"], inputs["beta"]
    assert torch.allclose(q.norm(dim=-1), torch.ones(2, 5, 2))  # type: ignore[union-attr]
    assert bool((g <= 0).all())  # log decay
    assert bool(((beta > 0) & (beta < 1)).all())


def test_grouped_value_heads_read_the_right_query_key_head(kda: KDA) -> None:
    """With HV = 2H, value head hv uses q/k head hv // 2: same as expanding q, k by hand."""
    gva = kda.make_inputs(Case("gva", Shape(1, 12, 2, 4, 8, 8, initial_state=True), seed=5))
    out = kda.reference(gva)
    assert out["o"].shape == (1, 12, 4, 8)
    assert out["final_state"].shape == (1, 4, 8, 8)

    expanded = dict(gva)
    for name in ("q", "k"):
        expanded[name] = gva[name].repeat_interleave(2, dim=2)  # type: ignore[union-attr]
    plain = kda.reference(expanded)
    for name in ("o", "final_state"):
        assert torch.allclose(out[name], plain[name], rtol=0, atol=1e-14), name
    # and heads are not interchangeable: pairing value head 1 with q/k head 1 differs
    swapped = dict(gva)
    for name in ("q", "k"):
        swapped[name] = gva[name].repeat(1, 1, 2, 1)  # type: ignore[union-attr]
    assert not torch.allclose(kda.reference(swapped)["o"], out["o"])


def test_initial_state_changes_the_output(kda: KDA) -> None:
    inputs = kda.make_inputs(Case("h0", Shape(1, 6, 1, 1, 8, 8, initial_state=True), seed=2))
    assert inputs["initial_state"] is not None
    with_state = kda.reference(inputs)["o"]
    without = kda.reference({**inputs, "initial_state": None})["o"]
    assert not torch.allclose(with_state, without)


@pytest.mark.parametrize(
    "shape",
    [Shape(1, 1024, 16, 16, 128, 128), Shape(2, 37, 2, 4, 32, 48), Shape(3, 1, 1, 1, 1, 1)],
)
def test_flops_are_six_kv_per_token_and_value_head(kda: KDA, shape: Shape) -> None:
    expected = 6 * shape.B * shape.T * shape.HV * shape.K * shape.V
    assert kda.flops(shape) == expected


def test_min_bytes_counts_the_initial_state_read(kda: KDA) -> None:
    without = Shape(1, 8, 2, 2, 4, 4)
    with_state = Shape(1, 8, 2, 2, 4, 4, initial_state=True)
    state_bytes = 4 * 1 * 2 * 4 * 4
    assert kda.min_bytes(with_state) - kda.min_bytes(without) == state_bytes


def test_call_without_final_state_is_refused(kda: KDA) -> None:
    inputs = kda.make_inputs(Case("x", Shape(1, 2, 1, 1, 4, 4)))

    def forgetful(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):  # type: ignore[no-untyped-def]
        return torch.zeros_like(v), None

    with pytest.raises(KernelRefusedError, match="final state"):
        kda.call(forgetful, inputs)


def test_registry_knows_kda_and_lists_it_for_unknown_names() -> None:
    from swarmfab.errors import WorkloadError

    assert isinstance(get_workload("kda"), KDA)
    with pytest.raises(WorkloadError, match="kda"):
        get_workload("flash-attention-9")


def test_shape_label_shows_grouped_heads_and_state() -> None:
    assert Shape(1, 64, 4, 4, 32, 32).label == "B1 T64 H4 K32 V32"
    assert Shape(2, 64, 2, 4, 32, 48, initial_state=True).label == "B2 T64 H2/HV4 K32 V48 +h0"
