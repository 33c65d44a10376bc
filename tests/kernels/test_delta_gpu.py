"""The KDA GPU design space: rendering, the kernels' mathematics under Triton's CPU
interpreter against the float64 reference, the sm_90 compile check, and (on a GPU host
only) verification of every kernel on the device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from triton_interpreter import failed_checks

from swarmfab.backends import cuda_device_available
from swarmfab.backends import gpu_compile_check as compile_check
from swarmfab.errors import WorkloadError
from swarmfab.kernels.delta_gpu import KERNELS, gpu_space, render_cuda, render_triton
from swarmfab.workloads import Case, Distribution, Shape, design_space
from swarmfab.workloads.delta.kda import KDA

gpu = pytest.mark.gpu
needs_device = pytest.mark.skipif(not cuda_device_available(), reason="needs a CUDA device")


def test_a_cuda_goal_selects_the_gpu_space_and_the_kernel_knob_picks_the_backend() -> None:
    space = design_space("kda", "cuda")
    assert space.name == "kda-gpu" and design_space("kda").backend == "c"
    for kernel, (backend, _) in KERNELS.items():
        candidate = space.instantiate({**space.default(), "kernel": kernel}, threads=1)
        assert candidate.backend == backend
    with pytest.raises(WorkloadError, match="no cuda design space"):
        design_space("gdn", "cuda")


def test_a_knob_the_chosen_kernel_ignores_gives_the_same_candidate() -> None:
    space = gpu_space()
    cuda = {**space.default(), "kernel": "cuda-recurrent"}
    same = space.instantiate({**cuda, "chunk": 64, "warps": 8}, threads=1)
    assert space.instantiate(cuda, threads=1).id == same.id
    other = space.instantiate({**cuda, "state": "shared"}, threads=1)
    assert other.id != same.id and "#define KDA_STATE_SHARED 1" in render_cuda(other.knobs)
    chunked = space.default()
    assert "CHUNK = 16" in render_triton(chunked)
    assert space.instantiate({**chunked, "k_split": 1}, threads=1).id == space.instantiate(
        chunked, threads=1).id


STRONG_DECAY = Case("strong-decay", Shape(1, 40, 1, 1, 32, 32, initial_state=True),
                    Distribution(gate_divisor=0.1), seed=4)
TAIL = Case("tail-not-chunk-multiple", Shape(1, 37, 2, 2, 32, 32), seed=1)
GVA = Case("gva-2x-k-ne-v", Shape(1, 20, 1, 2, 16, 48, initial_state=True), seed=2)
# states at shuffled slots of a larger pool, updated in place (the slots left out must
# come back untouched)
POOL = Case("prefill-in-place-pool", Shape(2, 21, 1, 2, 16, 32, True, pool=5), seed=10)


@pytest.mark.parametrize(("chunk", "cases"), [(16, [TAIL, GVA, STRONG_DECAY]), (32, [TAIL])])
def test_the_triton_chunked_kernel_matches_the_float64_reference_in_the_interpreter(
    tmp_path: Path, chunk: int, cases: list[Case]
) -> None:
    """The chunked kernel's WY/UT algebra, padding of a partial chunk, GVA heads, K != V,
    an initial state and strong decay (exponents must never be positive)."""
    setting = {**gpu_space().default(), "chunk": chunk}
    assert failed_checks(render_triton(setting), cases, tmp_path) == []


@pytest.mark.parametrize(("chunk", "cases"), [(16, [TAIL, GVA, STRONG_DECAY, POOL]),
                                            (32, [TAIL])])
def test_the_three_kernel_form_matches_the_float64_reference_in_the_interpreter(
    tmp_path: Path, chunk: int, cases: list[Case]
) -> None:
    """fla's structure: every chunk's W, M and scores at once, the state pass keeping each
    chunk's starting state and corrected values, every chunk's outputs at once; a partial
    last chunk (its decay to the end read from its last real token), GVA, K != V, pools."""
    setting = {**gpu_space().default(), "kernel": "triton-chunked-parallel", "chunk": chunk,
               "stages": 2}
    assert failed_checks(render_triton(setting), cases, tmp_path) == []


def test_the_triton_recurrent_kernel_matches_the_float64_reference_in_the_interpreter(
    tmp_path: Path,
) -> None:
    setting = {**gpu_space().default(), "kernel": "triton-recurrent", "block_v": 16}
    decode = Case("decode-with-state", Shape(2, 1, 2, 2, 16, 16, initial_state=True))
    assert failed_checks(render_triton(setting), [decode, GVA, POOL], tmp_path) == []


BF16 = [case.in_dtype("bfloat16") for case in (TAIL, GVA, STRONG_DECAY, POOL)]


@pytest.mark.slow  # a sandboxed verify in Triton's interpreter per kernel: 4-6 s each
@pytest.mark.parametrize(("kernel", "precision"), [("triton-chunked", "ieee"),
                                                   ("triton-chunked", "bf16"),
                                                   ("triton-chunked-parallel", "bf16"),
                                                   ("triton-recurrent", "ieee")])
def test_with_bfloat16_inputs_each_kernel_meets_the_bfloat16_tolerance(
    tmp_path: Path, kernel: str, precision: str
) -> None:
    """fla's users' precision: q, k, v, beta in bfloat16, o back in bfloat16 and the
    state in float32 (the check fails an output in another dtype), against the float64
    reference of the very bfloat16 inputs; bfloat16 products too."""
    setting = {**gpu_space().default(), "kernel": kernel, "dot_precision": precision}
    assert failed_checks(render_triton(setting), BF16, tmp_path) == []


def test_bfloat16_products_fail_a_float32_goal(tmp_path: Path) -> None:
    """The precision knob is judged by the verifier: bfloat16 products do not reach the
    float32 tolerance, so a float32 goal never crowns them."""
    setting = {**gpu_space().default(), "dot_precision": "bf16"}
    failed = failed_checks(render_triton(setting), [GVA], tmp_path)
    assert failed and any("rms ratio" in check for check in failed)


@pytest.mark.parametrize(("kernel", "right", "wrong"), [
    # the decay to the chunk's end taken from its start
    ("triton-chunked", "k_to_end = kc * tl.exp(cum_last[None, :] - cum)",
     "k_to_end = kc * tl.exp(cum)"),
    # a partial last chunk's decay read past its last real token
    ("triton-chunked-parallel", "tl.minimum(i_c * C + C - 1, T - 1)", "i_c * C + C - 1"),
])
def test_a_wrong_chunked_kernel_fails_the_interpreter_check(
        tmp_path: Path, kernel: str, right: str, wrong: str) -> None:
    """The check can fail."""
    source = render_triton({**gpu_space().default(), "kernel": kernel})
    assert right in source
    failed = failed_checks(source.replace(right, wrong), [TAIL], tmp_path)
    assert failed and any("final_state" in check for check in failed)


@pytest.mark.skipif(bool(compile_check.missing_tools()),
                    reason="the GPU compile check needs nvcc, ptxas and Triton")
def test_every_gpu_kernel_compiles_for_sm90_without_a_device(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """The quick form of `make gpu-compile-check` (each kernel's default setting)."""
    assert compile_check.main(["--quick"]) == 0
    printed = capsys.readouterr().out
    assert "3/3 GPU template settings compile for sm_90" in printed
    assert "kernel=cuda-recurrent" in printed and "registers=" in printed


def test_the_compile_check_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert shutil.which("nvcc") is None
    assert compile_check.main(["--quick"]) == 2
    assert "missing nvcc, ptxas" in capsys.readouterr().err


@gpu
@needs_device
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_gpu_kernel_is_verified_on_the_device(tmp_path: Path, kernel: str) -> None:
    from swarmfab.evaluation import Evaluator
    from swarmfab.records import Status
    from swarmfab.sandbox import Limits

    kda = KDA()
    evaluator = Evaluator(kda, [Shape(1, 512, 4, 4, 128, 128)], tmp_path, threads=1,
                          tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=300),
                          device="cuda")
    space = gpu_space()
    verdict = evaluator.verify(space.instantiate({**space.default(), "kernel": kernel},
                                                 threads=1))
    assert verdict.status is Status.ACCEPTED, verdict.reason
