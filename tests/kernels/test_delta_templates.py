"""Every variant of the gated delta rule's C templates passes the full verifier.

Each setting below changes what the compiled kernel does (algorithm family, chunk size,
sub-block tails, micro-kernel shapes, value tiles, state layout, vector target); each is
built and judged by the real :class:`Evaluator` in the sandbox on the whole built-in
corpus (strong decay, GVA, tails, decode with a state) plus fresh fuzz draws, with the
probes run around every call. KDA and GDN share the templates, so both are checked.

The vector target is the one knob whose values depend on the host: every target the
design space can offer is tried, and those this CPU cannot run are skipped with the
reason (the ``isa`` fixture in tests/conftest.py). Building and verifying in the sandbox
takes seconds per setting, so the matrices are marked slow (``make test-fast`` leaves
them out).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch

from swarmfab.evaluation import Evaluator
from swarmfab.kernels import DesignSpace, KnobValue
from swarmfab.kernels import delta as delta_kernels
from swarmfab.kernels._host import (
    all_isa_names,
    full_width_isa,
    isa_targets,
    narrow_native_vectors,
    native_vector_bits,
    vector_registers,
)
from swarmfab.kernels.allocator import glibc_malloc
from swarmfab.records import Status
from swarmfab.sandbox import Limits
from swarmfab.verify import draw_cases
from swarmfab.workloads import Case, Distribution, Shape, design_space, get_workload

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CHUNKED: dict[str, KnobValue] = {"algorithm": "chunked"}
RECURRENT: dict[str, KnobValue] = {"algorithm": "recurrent"}
VARIANTS: list[tuple[str, dict[str, KnobValue]]] = [
    ("recurrent-tiles-cached", {**RECURRENT, "parallel": "tiles", "output_stores": "cached"}),
    ("recurrent-separate-vmajor-heads", {**RECURRENT, "passes": "separate", "decay": "eager",
                                         "state_layout": "v-major", "tile_v": 16}),
    ("recurrent-serial-fastmath-huge-state-ahead", {**RECURRENT, "parallel": "serial",
                                                    "tile_v": 128, "optimisation": "O3-fastmath",
                                                    "output_pages": "huge",
                                                    "state_prefetch": "next"}),
    ("recurrent-eager-fused-rows4-no-state-ahead", {**RECURRENT, "decay": "eager",
                                                    "passes": "fused", "row_group": 4,
                                                    "state_prefetch": "none"}),
    ("recurrent-pipelined-rows1-cached", {**RECURRENT, "row_group": 1, "tile_v": 8,
                                          "token_group": 1, "output_stores": "cached"}),
    ("recurrent-groups-of-8-streamed", {**RECURRENT, "token_group": 8, "tile_v": 16,
                                        "output_stores": "streaming"}),
    ("recurrent-groups-of-4-no-prefetch", {**RECURRENT, "token_group": 4, "row_group": 1,
                                           "input_prefetch": "none"}),
    # blocks of prepared tokens longer than the default's 16, with groups that fill them
    ("recurrent-blocks-of-64-groups-of-8", {**RECURRENT, "block_tokens": 64, "token_group": 8}),
    ("recurrent-blocks-of-32-eager-fused", {**RECURRENT, "block_tokens": 32, "decay": "eager",
                                            "passes": "fused"}),
    ("recurrent-streamed-partial-tiles", {**RECURRENT, "output_stores": "streaming",
                                          "tile_v": 64, "token_group": 1}),
    # a group's projection runs a tile in slices half its registers hold (16 columns for
    # groups of 2 on AVX2, the whole 64 with AVX-512), the 48-column case's tile padded
    ("recurrent-groups-of-2-wide-tiles", {**RECURRENT, "token_group": 2, "tile_v": 64}),
    ("recurrent-groups-of-2-fused-tails", {**RECURRENT, "token_group": 2, "passes": "fused",
                                           "parallel": "tiles"}),
    ("recurrent-deferred-pipelined-vmajor-tiles", {**RECURRENT, "decay": "deferred",
                                                   "passes": "pipelined", "tile_v": 16,
                                                   "state_layout": "v-major", "parallel": "tiles"}),
    ("recurrent-eager-pipelined-wide", {**RECURRENT, "decay": "eager", "passes": "pipelined",
                                        "tile_v": 64, "optimisation": "O2"}),
    ("recurrent-deferred-separate-narrow", {**RECURRENT, "decay": "deferred",
                                            "passes": "separate", "tile_v": 8,
                                            "token_group": 1}),
    # a value head per job (the default runs up to 4 side by side, block by block)
    ("recurrent-one-head-per-job", {**RECURRENT, "head_group": 1, "token_group": 1}),
    # one token per sequence through the prefill tiles (decode=direct is the default)
    ("recurrent-decode-through-tiles", {**RECURRENT, "decode": "tiles"}),
    ("recurrent-decode-direct-serial-unprefetched", {**RECURRENT, "parallel": "serial",
                                                     "state_prefetch": "none"}),
    # glibc's malloc keeping freed memory (process-wide, in the verifying job)
    *([("recurrent-retain-freed-memory", {**RECURRENT, "allocator": "retain",
                                          "token_group": 1})] if glibc_malloc() else []),
    ("chunked-default", {}),
    ("chunked-huge-guided", {**CHUNKED, "output_pages": "huge", "schedule": "guided"}),
    ("chunked-16-tiles", {**CHUNKED, "chunk": 16, "parallel": "tiles", "tile_v": 16,
                          "schedule": "dynamic"}),
    ("chunked-32-rb12-unroll", {**CHUNKED, "chunk": 32, "register_rows": 12,
                                "micro_cols": 16, "unroll": 4, "optimisation": "O3-fastmath"}),
    ("chunked-128-rb2-wide", {**CHUNKED, "chunk": 128, "register_rows": 2, "micro_cols": 64,
                              "parallel": "serial", "optimisation": "O3-fastmath-unroll"}),
]


def _evaluator(workload: str, cache: Path) -> Evaluator:
    work = get_workload(workload)
    return Evaluator(work, [Shape(1, 40, 2, 2, 32, 32)], cache, threads=2,
                     tolerances=work.tolerances(torch.float32), limits=Limits(wall_s=120))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("template-cache")


@pytest.fixture(scope="module")
def evaluators(cache: Path) -> dict[str, Evaluator]:
    """One evaluator per workload: references are computed once for every variant."""
    return {name: _evaluator(name, cache) for name in ("kda", "gdn")}


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["kda", "gdn"])
@pytest.mark.parametrize(("name", "changes"), VARIANTS, ids=[name for name, _ in VARIANTS])
def test_template_variant_passes_the_verifier(
    workload: str, name: str, changes: dict[str, KnobValue], evaluators: dict[str, Evaluator]
) -> None:
    space = design_space(workload)
    candidate = space.instantiate({**space.default(), **changes}, threads=2)
    evaluator = evaluators[workload]
    cases = [*evaluator.cases, *draw_cases(evaluator.workload, random.Random(name), 2)]
    assert any(case.name == "strong-decay" for case in cases)
    verdict = evaluator.verify(candidate, cases)
    assert verdict.status is Status.ACCEPTED, f"{name}: {verdict.reason}"
    assert all(check.passed for check in verdict.checks)


# what a vector target changes: the chunked micro-kernels, and the recurrence's sweeps with
# its outputs streamed (whole 64-byte lines by AVX-512 intrinsics where the target has
# them, plain stores elsewhere); token by token, which compiles in a quarter of the time
# groups of tokens take
ISA_VARIANTS: list[tuple[str, dict[str, KnobValue]]] = [
    ("chunked", CHUNKED),
    ("recurrent-streamed", {**RECURRENT, "output_stores": "streaming", "tile_v": 16,
                            "token_group": 1}),
]
# strong decay; a tail shorter than a chunk; value columns (48) not a multiple of a vector;
# decode's sweeps, as wide as the target's registers hold
ISA_CASES = ("strong-decay", "tail-not-chunk-multiple", "gva-2x-k-ne-v",
             "decode-gva-wide-values")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "changes"), ISA_VARIANTS, ids=[n for n, _ in ISA_VARIANTS])
def test_every_isa_target_the_host_can_run_builds_and_passes(
    isa: str, name: str, changes: dict[str, KnobValue], evaluators: dict[str, Evaluator],
) -> None:
    space = design_space("kda")
    evaluator = evaluators["kda"]
    cases = [case for case in evaluator.cases if case.name in ISA_CASES]
    assert len(cases) == len(ISA_CASES)
    candidate = space.instantiate({**space.default(), **changes, "isa": isa}, threads=1)
    assert set(dict(isa_targets())[isa]) <= set(candidate.flags)
    verdict = evaluator.verify(candidate, cases)
    assert verdict.status is Status.ACCEPTED, f"{isa} {name}: {verdict.reason}"
    assert all(check.passed for check in verdict.checks)


@pytest.mark.slow
@pytest.mark.parametrize("group", [2, 4, 8])
def test_groups_are_exact_where_the_keys_are_not_whole_vectors(
        group: int, evaluators: dict[str, Evaluator]) -> None:
    """20 keys: a group's dot products end with keys past the last whole vector on every
    target (4, 8 or 16 floats), which no corpus case has (their key dims are multiples
    of 8)."""
    space = design_space("kda")
    candidate = space.instantiate({**space.default(), **RECURRENT, "token_group": group},
                                  threads=2)
    cases = [Case("keys-not-whole-vectors", Shape(2, 37, 1, 2, 20, 24, initial_state=True),
                  seed=group),
             Case("keys-not-whole-vectors-strong-decay", Shape(1, 50, 1, 1, 20, 16),
                  Distribution(gate_divisor=0.1), seed=group)]
    verdict = evaluators["kda"].verify(candidate, cases)
    assert verdict.status is Status.ACCEPTED, verdict.reason


def test_knobs_a_template_ignores_render_the_same_candidate() -> None:
    space: DesignSpace = design_space("kda")
    base = {**space.default(), **RECURRENT}
    recurrent = space.instantiate(base, threads=2)
    assert space.instantiate({**base, "chunk": 16}, threads=2).id == recurrent.id
    chunked = space.instantiate({**base, **CHUNKED}, threads=2)
    assert chunked.id != recurrent.id
    assert space.instantiate({**base, **CHUNKED, "passes": "separate"}, threads=2).id == chunked.id
    assert space.instantiate({**base, **CHUNKED, "chunk": 32}, threads=2).id != chunked.id
    assert "CH_C 64" in chunked.sources[chunked.entry]


def test_isa_targets_follow_the_reported_flags() -> None:
    v4 = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "avx512f",
                    "avx512bw", "avx512cd", "avx512dq", "avx512vl"})
    names = [name for name, _ in isa_targets(v4, "x86_64")]
    assert names == ["sse2", "avx2", "avx512-256", "avx512", "native", "native-512"]
    avx2_only = frozenset(f for f in v4 if not f.startswith("avx512"))
    assert [n for n, _ in isa_targets(avx2_only, "x86_64")] == ["sse2", "avx2", "native"]
    assert [n for n, _ in isa_targets(frozenset({"asimd"}), "aarch64")] == ["native"]
    assert all_isa_names() == tuple(names)


def test_the_compilers_preferred_vector_width_is_read_from_its_target_help(
    tmp_path: Path,
) -> None:
    gcc = tmp_path / "gcc-like"
    gcc.write_text("#!/bin/sh\necho '  -mprefer-avx128     \t\t-mprefer-vector-width=128'\n"
                   "echo '  -mprefer-vector-width=      \t\t256'\n")
    gcc.chmod(0o755)
    assert native_vector_bits(str(gcc)) == 256
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho '  -mprefer-vector-width=  512'\nexit 1\n")
    failing.chmod(0o755)
    assert native_vector_bits(str(failing)) is None
    assert native_vector_bits(str(tmp_path / "absent")) is None


V3 = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def test_native_vectors_are_narrow_where_the_compiler_tunes_for_less_than_the_host_has(
) -> None:
    # AVX-512 tuned for 256 bits (most Intel cores), AVX2 for 128 (GCC's first Zen, which
    # it takes an AMD CPU for whose model a VM hides)
    assert narrow_native_vectors(V4, native_bits=256)
    assert not narrow_native_vectors(V4, native_bits=512)
    assert narrow_native_vectors(V3, native_bits=128)
    assert not narrow_native_vectors(V3, native_bits=256)
    assert not narrow_native_vectors(frozenset({"sse2"}), native_bits=128)
    assert full_width_isa(V4, native_bits=256) == "native-512"
    assert full_width_isa(V3, native_bits=128) == "avx2"
    assert full_width_isa(V3, native_bits=256) is None


@pytest.mark.parametrize(("flags", "wide"), [(V4, "native-512"), (V3, "avx2"), (V4, None)],
                         ids=["avx512-tuned-narrow", "avx2-tuned-narrow", "full-width"])
def test_full_width_vectors_are_a_starting_point_where_native_code_is_narrower(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], wide: str | None,
) -> None:
    monkeypatch.setattr(delta_kernels, "isa_targets", lambda: isa_targets(flags, "x86_64"))
    monkeypatch.setattr(delta_kernels, "full_width_isa", lambda: wide)
    moves = [move for move, _ in delta_kernels.delta_space("kda").starting]
    assert moves[0] == {"algorithm": "recurrent"}
    assert [move for move in moves if "isa" in move] == ([{"isa": wide}] if wide else [])


def test_on_this_host_native_code_is_as_wide_as_the_host_or_a_target_is() -> None:
    """Whatever this host's compiler reads it as, the space offers full-width vectors."""
    wide, bits = full_width_isa(), native_vector_bits()
    names = [name for name, _ in isa_targets()]
    assert wide is None or wide in names
    if wide is None and "avx2" in names and bits is not None:  # the compiler said its width
        assert bits >= (512 if "avx512" in names else 256)


def test_vector_registers_follow_the_reported_flags() -> None:
    assert vector_registers(frozenset({"avx", "avx2", "fma"})) == 16
    assert vector_registers(frozenset({"avx2", "avx512f"})) == 32


@pytest.mark.parametrize(("registers", "group", "rows"), [(16, 2, 1), (32, 4, 2)])
def test_the_recurrences_defaults_fit_the_vector_registers(
    monkeypatch: pytest.MonkeyPatch, registers: int, group: int, rows: int,
) -> None:
    """A group's partial sums (2 x token_group rows) and the sweeps' (2 x row_group) take
    half of 16 registers at groups of 2 and one row, spilling at the defaults of 32."""
    monkeypatch.setattr(delta_kernels, "vector_registers", lambda: registers)
    default = delta_kernels.delta_space("kda").default()
    assert (default["token_group"], default["row_group"]) == (group, rows)


def test_the_isa_matrix_covers_every_target_this_host_offers() -> None:
    """The ``isa`` fixture runs all_isa_names(); a target beyond them would go untested."""
    assert {name for name, _ in isa_targets()} <= set(all_isa_names())
