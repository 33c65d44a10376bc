"""Decode in place into a state pool, as engines call the delta rule.

A sequence decoded in pieces (chunks of its prompt, then token by token) with its state
kept in a slot of a pool must end where the whole sequence in one call ends, for the
PyTorch baselines and for compiled kernels through their pooled entry point
(``<symbol>_indexed``, reading and writing the pool where it lies) or without it (fla's
signature alone, gathered and scattered). Slots outside the pool, repeated slots and
pools of the wrong kind are refused with a clear error by the Python wrapper and by
the C entry point itself; the probes let exactly the pool change.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmfab.backends._base import Artifact
from swarmfab.backends.c import CBackend, load_symbol
from swarmfab.verify import compare_outputs, probes
from swarmfab.workloads import Case, Forward, Shape, design_space, get_workload

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
NAMES = ("q", "k", "v", "g", "beta")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    """Both templates of each workload, built once."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    cache, built = tmp_path_factory.mktemp("pool-kernels"), {}
    for workload in ("kda", "gdn"):
        space = design_space(workload)
        for algorithm in ("recurrent", "chunked"):
            candidate = space.instantiate({**space.default(), "algorithm": algorithm},
                                          threads=2)
            built[f"{workload}-{algorithm}"] = CBackend().build(candidate, cache)
    return built


def _kernel(artifacts: dict[str, Artifact], name: str, indexed: bool = True) -> Forward:
    workload = get_workload(name.split("-")[0])
    if indexed:
        return CBackend().load(artifacts[name], workload, fill_outputs=True)
    return workload.wrap_c(load_symbol(artifacts[name], workload))  # fla's entry point alone


def _forwards(artifacts: dict[str, Artifact], workload: str) -> dict[str, Forward]:
    return {
        "torch-recurrent": get_workload(workload).baselines()["torch-recurrent"],
        "torch-chunked": get_workload(workload).baselines()["torch-chunked"],
        "c-recurrent": _kernel(artifacts, f"{workload}-recurrent"),
        "c-chunked": _kernel(artifacts, f"{workload}-chunked"),
        "c-chunked-gathered": _kernel(artifacts, f"{workload}-chunked", indexed=False),
    }


@needs_gcc
@pytest.mark.parametrize("order", [[6, 1, 3], [2, 3, 4]], ids=["scattered", "a-run"])
@pytest.mark.parametrize("workload", ["kda", "gdn"])
def test_a_sequence_decoded_in_pieces_in_a_pool_ends_where_one_call_ends(
    artifacts: dict[str, Artifact], workload: str, order: list[int]
) -> None:
    """Three sequences share a pool of 8 slots: prefill in chunks of 17, 17 and 6 tokens,
    then 5 decode steps of all three at once; the outputs and the slots' states equal
    one call over the whole 45 tokens; the 5 slots never used are untouched. Slots in a
    run are worked on in the pool itself, scattered ones gathered and written back."""
    work = get_workload(workload)
    whole = work.make_inputs(Case("whole", Shape(3, 45, 2, 4, 32, 16, True), seed=3))
    expected = work.reference(whole)
    slots = torch.tensor(order)
    for name, forward in _forwards(artifacts, workload).items():
        pool = torch.randn(8, 4, 32, 16)
        untouched = pool.clone()
        pool[slots] = whole["initial_state"]  # type: ignore[index]
        pieces = []
        for start, stop in ((0, 17), (17, 34), (34, 40), *((t, t + 1) for t in range(40, 45))):
            inputs = [whole[n][:, start:stop] for n in NAMES]  # type: ignore[index]
            o, state = forward(*inputs, scale=whole["scale"], initial_state=pool,
                               output_final_state=True, inplace_final_state=True,
                               state_indices=slots)
            assert state is pool, name
            pieces.append(o)
        outputs = {"o": torch.cat(pieces, dim=1), "final_state": pool[slots]}
        checks = compare_outputs(name, outputs, expected, work.tolerances(torch.float32))
        assert all(check.passed for check in checks), (name, [c.detail for c in checks])
        others = [s for s in range(8) if s not in slots.tolist()]
        assert torch.equal(pool[others], untouched[others]), name


@needs_gcc
@pytest.mark.parametrize("bad", [[0, 0, 1], [0, 1, 8], [-1, 0, 1], [0, 1], [0.0, 1.0, 2.0]],
                         ids=["repeated", "past-the-end", "negative", "too-few", "floats"])
def test_bad_slots_are_refused_and_the_pool_left_as_it_was(
    artifacts: dict[str, Artifact], bad: list[Any]
) -> None:
    work = get_workload("kda")
    inputs = work.make_inputs(Case("p", Shape(3, 2, 1, 1, 16, 16, True, pool=8), seed=1))
    pool = inputs["initial_state"]
    assert isinstance(pool, torch.Tensor)
    before = pool.clone()
    for name, forward in _forwards(artifacts, "kda").items():
        with pytest.raises(ValueError, match="state_indices"):
            forward(*(inputs[n] for n in NAMES), initial_state=pool,
                    inplace_final_state=True, state_indices=torch.tensor(bad))
        assert torch.equal(pool, before), name


def test_pools_that_cannot_be_updated_in_place_are_refused() -> None:
    work = get_workload("kda")
    inputs = work.make_inputs(Case("p", Shape(2, 1, 1, 1, 16, 16, True, pool=4), seed=1))
    args = [inputs[n] for n in NAMES]
    pool = inputs["initial_state"]
    assert isinstance(pool, torch.Tensor)
    forward = work.baselines()["torch-recurrent"]
    with pytest.raises(ValueError, match="contiguous float32"):
        forward(*args, initial_state=pool.double(), inplace_final_state=True)
    with pytest.raises(ValueError, match="contiguous float32"):
        forward(*args, initial_state=pool.transpose(2, 3), inplace_final_state=True)
    with pytest.raises(ValueError, match=r"\[N, 1, 16, 16\]"):
        forward(*args, initial_state=pool[:, :, :8], inplace_final_state=True)
    with pytest.raises(ValueError, match="needs initial_state"):
        forward(*args, inplace_final_state=True)
    with pytest.raises(ValueError, match="inplace_final_state=True"):
        forward(*args, initial_state=pool, state_indices=[0, 1])
    with pytest.raises(ValueError, match="one state per sequence"):
        forward(*args, initial_state=pool[:1], inplace_final_state=True)


@needs_gcc
def test_the_c_entry_point_itself_refuses_bad_slots_before_writing(
    artifacts: dict[str, Artifact],
) -> None:
    """An engine calling the library directly gets status 3 and an untouched pool."""
    library = ctypes.CDLL(str(artifacts["kda-recurrent"].path))
    indexed = library.kda_forward_indexed
    indexed.restype = ctypes.c_int
    indexed.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int64, ctypes.c_float] + \
        [ctypes.c_int64] * 6
    work = get_workload("kda")
    inputs = work.make_inputs(Case("p", Shape(2, 1, 1, 1, 16, 16, True, pool=4), seed=2))
    pool = inputs["initial_state"]
    assert isinstance(pool, torch.Tensor)
    before, o = pool.clone(), torch.zeros(2, 1, 1, 16)
    pointers = [inputs[n].data_ptr() for n in NAMES]  # type: ignore[union-attr]
    for bad in ([1, 1], [0, 4], [-2, 0]):
        slots = torch.tensor(bad)
        status = indexed(*pointers, pool.data_ptr(), o.data_ptr(), pool.data_ptr(),
                         slots.data_ptr(), 4, 0.25, 2, 1, 1, 1, 16, 16)
        assert status == 3, bad
        assert torch.equal(pool, before) and not o.any()
    good = torch.tensor([3, 0])
    status = indexed(*pointers, pool.data_ptr(), o.data_ptr(), pool.data_ptr(),
                     good.data_ptr(), 4, 0.25, 2, 1, 1, 1, 16, 16)
    assert status == 0 and torch.equal(pool[1:3], before[1:3])
    assert not torch.equal(pool[[3, 0]], before[[3, 0]])


def test_the_probes_let_the_pool_change_and_nothing_else() -> None:
    work = get_workload("kda")
    inputs = work.make_inputs(Case("p", Shape(2, 3, 1, 1, 16, 16, True, pool=5), seed=4))
    pristine = probes.snapshot(inputs)
    outputs = work.call(work.baselines()["torch-recurrent"], inputs)
    in_place = work.written_in_place(inputs)
    assert in_place == {"final_state": "initial_state"}
    assert probes.modified_inputs(pristine, inputs, in_place) == ()
    assert probes.modified_inputs(pristine, inputs) == ("initial_state",)
    assert probes.aliased_outputs(outputs, inputs, in_place) == ()
    # an output that is a view of another input is still caught
    assert probes.aliased_outputs({"o": inputs["q"], "final_state": outputs["final_state"]},  # type: ignore[dict-item]
                                  inputs, in_place) == ("o",)
    inputs["q"].mul_(2)  # type: ignore[union-attr]
    assert probes.modified_inputs(pristine, inputs, in_place) == ("q",)


def test_a_kernel_that_returns_new_states_but_leaves_the_pool_fails_verification() -> None:
    work = get_workload("kda")
    case = Case("p", Shape(2, 3, 1, 1, 16, 16, True, pool=5), seed=5)
    inputs = work.make_inputs(case)
    reference = work.reference(inputs)
    plain = work.baselines()["torch-recurrent"]

    def not_in_place(*args: Any, initial_state: torch.Tensor, state_indices: Any,
                     **kwargs: Any) -> Any:
        start = initial_state[torch.as_tensor(state_indices)]
        return plain(*args, initial_state=start, output_final_state=True,
                     scale=kwargs["scale"])

    outputs = work.call(not_in_place, inputs)
    checks = compare_outputs(case.name, outputs, reference, work.tolerances(torch.float32))
    assert [check.passed for check in checks] == [True, False]


def test_pooled_shapes_read_back_from_goals_and_the_command_line(tmp_path: Path) -> None:
    from swarmfab.goal import ShapeSpec, parse_shape

    shape = parse_shape("64,1,16,128,128+pool256")
    assert shape == Shape(64, 1, 16, 16, 128, 128, initial_state=True, pool=256)
    assert shape.label == "B64 T1 H16 K128 V128 +pool256"
    assert ShapeSpec(B=4, T=1, H=2, K=8, V=8, pool=4).to_shape().initial_state
    with pytest.raises(ValueError, match="pool"):
        ShapeSpec(B=4, T=1, H=2, K=8, V=8, pool=3)
    with pytest.raises(ValueError, match="pool"):
        Shape(4, 1, 2, 2, 8, 8, initial_state=False, pool=8)
    case = Case("c", shape)
    assert Case.from_dict(case.to_dict()) == case
    assert "pool" not in Case("d", Shape(1, 2, 1, 1, 4, 4)).to_dict()["shape"]
