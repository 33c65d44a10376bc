"""Packed sequences (fla's cu_seqlens): the shape, the inputs, the reference as separate
calls, and a compiled candidate's packed entry point against one call per sequence."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.backends import get_backend
from swarmfab.errors import CandidateError
from swarmfab.workloads import Case, Shape, design_space, get_workload
from swarmfab.workloads.delta.varlen import checked_offsets, offsets, per_sequence


def test_a_packed_shape_is_one_batch_of_its_lengths() -> None:
    shape = Shape(1, 10, 2, 2, 8, 8, True, lengths=(3, 7))
    assert shape.sequences == 2 and shape.label == "varlen2 T10 H2 K8 V8 +h0"
    assert Case.from_dict(Case("x", shape).to_dict()).shape == shape
    for wrong in ({"B": 2}, {"T": 11}):
        with pytest.raises(ValueError, match="packed sequences"):
            Shape(**{"B": 1, "T": 10, "H": 2, "HV": 2, "K": 8, "V": 8,
                     "lengths": (3, 7), **wrong})


def test_offsets_are_checked_before_any_kernel_reads_them() -> None:
    assert offsets((3, 7)).tolist() == [0, 3, 10]
    assert checked_offsets(torch.tensor([0, 3, 10]), 10) == [0, 3, 10]
    for bad in (torch.tensor([0, 5, 3, 10]), torch.tensor([1, 10]), torch.tensor([0, 9]),
                torch.tensor([0.0, 10.0])):
        with pytest.raises(CandidateError, match="cu_seqlens"):
            checked_offsets(bad, 10)


@pytest.mark.parametrize("workload", ["kda", "gdn"])
def test_the_reference_of_packed_sequences_is_each_on_its_own(workload: str) -> None:
    rule = get_workload(workload)
    lengths = (1, 30, 4)
    packed = rule.make_inputs(Case("p", Shape(1, 35, 2, 4, 16, 8, True, lengths=lengths)))
    reference = rule.reference(packed)
    assert reference["final_state"].shape == (3, 4, 16, 8)
    for n, (start, end) in enumerate(((0, 1), (1, 31), (31, 35))):
        alone = {name: (value[:, start:end] if name in ("q", "k", "v", "g", "beta") else
                        value[n:n + 1] if name == "initial_state" else value)
                 for name, value in packed.items() if name != "cu_seqlens"}
        separate = rule.reference(alone)
        assert torch.allclose(reference["o"][:, start:end], separate["o"])
        assert torch.allclose(reference["final_state"][n], separate["final_state"][0])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("algorithm", ["chunked", "recurrent"])
def test_the_packed_entry_point_equals_one_call_per_sequence(algorithm: str,
                                                             tmp_path: Path) -> None:
    rule = get_workload("kda")
    space = design_space("kda")
    candidate = space.instantiate({**space.default(), "algorithm": algorithm}, threads=2)
    backend = get_backend(candidate.backend)
    forward = backend.load(backend.build(candidate, tmp_path), rule, fill_outputs=True)
    inputs = rule.make_inputs(Case("p", Shape(1, 75, 2, 4, 32, 32, True,
                                               lengths=(1, 64, 3, 7)), seed=3))
    q, k, v, g, beta, h0, cu = (inputs[n] for n in ("q", "k", "v", "g", "beta",
                                                     "initial_state", "cu_seqlens"))
    packed = forward(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                     cu_seqlens=cu)
    separate = per_sequence(forward, q, k, v, g, beta, None, h0, True, cu)  # type: ignore[arg-type]
    for got, expected in zip(packed, separate, strict=True):
        assert torch.equal(got, expected)  # the same body, the same arithmetic
    with pytest.raises(CandidateError, match="cu_seqlens"):
        forward(q, k, v, g, beta, initial_state=h0, cu_seqlens=torch.tensor([0, 80]))
