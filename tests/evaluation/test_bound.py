"""A memory-bound shape's roofline bound is timed beside the implementations: an in-place
update of its compulsory bytes runs in the same rounds, and its median is the bound's
memory term. A host's bandwidth moves with its neighbours' load (a 2-core Zen 4 VM read
32-96 GB/s for one copy within minutes), so stored peaks would give each table another
bound."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.evaluation._bound import MEMORY_STREAM, bound_seconds, memory_bound
from swarmfab.measure import TimingPolicy
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, Status
from swarmfab.sandbox import Limits
from swarmfab.workloads import Shape, get_workload

QUICK = TimingPolicy(min_rounds=3, max_rounds=6, max_seconds=1.0)
DECODE = Shape(B=8, T=1, H=2, HV=2, K=64, V=64, initial_state=True, pool=8)
PREFILL = Shape(B=1, T=64, H=2, HV=2, K=64, V=64)
# 100 GFLOP/s and 10 GB/s: decode moves bytes, this prefill does FLOPs
PEAKS = HostPeaks("test host", 100e9, 10e9)


def test_which_shapes_time_their_memory_and_what_the_bound_becomes() -> None:
    kda = get_workload("kda")
    assert memory_bound(kda, DECODE, PEAKS)
    assert not memory_bound(kda, PREFILL, PEAKS)
    assert not memory_bound(kda, DECODE, None)
    nbytes, flops = kda.min_bytes(DECODE), kda.flops(DECODE)
    assert bound_seconds(kda, DECODE, PEAKS) == pytest.approx(nbytes / 10e9)
    assert bound_seconds(kda, DECODE, None) is None
    # timed beside: the stream's median, never below the FLOPs at the peak rate
    assert bound_seconds(kda, DECODE, PEAKS, [3e-3, 1e-3, 2e-3]) == pytest.approx(2e-3)
    assert bound_seconds(kda, DECODE, PEAKS, [1e-12] * 3) == pytest.approx(flops / 100e9)


def _evaluator(tmp_path: Path) -> Evaluator:
    kda = get_workload("kda")
    return Evaluator(kda, [DECODE, PREFILL], tmp_path / "cache", threads=1,
                     tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=120),
                     policy=QUICK, peaks=PEAKS)


@pytest.mark.slow
def test_a_side_by_side_table_times_a_memory_bound_shapes_bytes_in_its_rounds(
        tmp_path: Path) -> None:
    evaluator = _evaluator(tmp_path)
    tables = evaluator.side_by_side(
        [Implementation("torch-recurrent", baseline="torch-recurrent"),
         Implementation("torch-chunked", baseline="torch-chunked")], QUICK)
    decode, prefill = tables
    assert decode.memory_s is not None and prefill.memory_s is None
    assert MEMORY_STREAM not in decode.seconds and MEMORY_STREAM not in decode.faults
    assert set(decode.seconds) == set(decode.ratio_to_reference) == {"torch-recurrent",
                                                                     "torch-chunked"}
    assert 0 < decode.memory_s.low <= decode.memory_s.median <= decode.memory_s.high
    assert decode.bound_s == pytest.approx(decode.memory_s.median)
    # the stored bandwidth gives the compute-bound shape's bound as before
    assert prefill.bound_s == pytest.approx(bound_seconds(evaluator.workload, PREFILL, PEAKS))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_an_evaluation_reads_its_roofline_from_the_stream_and_judges_only_the_candidate(
        tmp_path: Path, template: Candidate) -> None:
    evaluator = _evaluator(tmp_path)
    evaluator.prepare()
    incumbent = Implementation("torch-recurrent", baseline="torch-recurrent")
    verdict = evaluator.evaluate(template, {c.shape.label: incumbent for c in evaluator.targets})
    assert verdict.status is Status.ACCEPTED, verdict.reason
    decode, prefill = verdict.timings
    assert decode.beside_s == {} and decode.beside_ratio == {}
    assert decode.roofline_fraction is not None and prefill.roofline_fraction is not None
    # the stream took at most what the candidate's fraction says, at least the FLOPs
    stream_s = decode.roofline_fraction * decode.candidate_s.median
    assert stream_s >= evaluator.workload.flops(DECODE) / PEAKS.flops_per_s
    assert stream_s != pytest.approx(bound_seconds(evaluator.workload, DECODE, PEAKS))
