"""CPU design space of the gated delta rule family (KDA, GDN): two C templates, their knobs.

Both workloads share the templates; a workload only sets how its gate is laid out and the
name of its entry point, so the agents, knobs and search are the same. The ``algorithm``
knob picks the template:

- ``recurrent.c``: token by token, the state tiled by value columns (a tile stays in
  L1/L2 for the whole sequence), the decay applied every token or deferred into
  rescaled keys and queries;
- ``chunked.c``: the chunked WY/UT form, intra-chunk products with anchored decays, a
  triangular solve and register-blocked micro-kernels.

``common.h`` (argument struct, exp, output pages) goes in front of either template, so
a candidate stays one file. Knobs a template does not read are left out of its source,
so two settings that differ only there render the same candidate (same content hash)
and are judged once.
"""

from __future__ import annotations

import functools
import shlex
from importlib import resources

from swarmfab.kernels._host import full_width_isa, isa_targets, vector_registers
from swarmfab.kernels._space import DesignSpace, Knob, KnobValue, Setting
from swarmfab.kernels.allocator import faults_are_costly, glibc_malloc, heap_serves

__all__ = ["delta_space"]

_GATE_IS_SCALAR = {"kda": False, "gdn": True}

_OPTIMISATION = {
    "O2": ("-O2",),
    "O3": ("-O3",),
    "O3-fastmath": ("-O3", "-ffast-math"),
    "O3-fastmath-unroll": ("-O3", "-ffast-math", "-funroll-loops"),
}
_PARALLEL = {"serial": 0, "heads": 1, "tiles": 2}
_PASSES = {"separate": 4, "fused": 2, "pipelined": 1}
_OUTPUT_PAGES = {"small": 0, "huge": 1, "populated": 2}
# what only the recurrence's tiles read: a one-token call with decode=direct never does
_TILE_KNOBS = frozenset({"passes", "decay", "tile_v", "token_group", "block_tokens",
                         "head_group", "row_group", "state_layout", "output_stores",
                         "input_prefetch"})


_ADVISED_BYTES = 2 * 2**20  # common.h: smaller outputs are left as they are (DELTA_HUGE)


def _inert(setting: Setting, shape: object) -> frozenset[str]:
    """The knobs a call of ``shape`` never reads under ``setting``: at one token per
    sequence the recurrence with ``decode = direct`` sweeps the states where they lie,
    and none of its tiles' knobs is read; ``output_pages`` acts on no output under 2 MiB
    (nor on a pool updated in place); ``allocator`` changes nothing where the call's
    blocks come from the heap whichever way malloc is set (under 32 MiB in all, such as a
    B64 decode's 512 KiB)."""
    inert: frozenset[str] = frozenset()
    one_token = getattr(shape, "T", None) == 1
    if one_token and setting.get("algorithm") == "recurrent" and setting.get("decode") == "direct":
        inert = _TILE_KNOBS
    blocks = _call_bytes(shape)
    if blocks is not None and max(blocks[:2]) < _ADVISED_BYTES:
        inert |= {"output_pages"}
    if blocks is not None and heap_serves(blocks):
        inert |= {"allocator"}
    return inert


def _call_bytes(shape: object) -> tuple[int, int, int] | None:
    """The bytes of the blocks a call of the delta rule's ``shape`` allocates from the
    main heap: its outputs (float32 o, and the final state unless the pool is updated in
    place: 0 then), and the calling thread's scratch in a template (about one state's K x
    V, its tiles; the other threads' come from arenas of their own); None for a shape
    that is not the delta rule's."""
    try:
        B, T, HV, K, V = (int(getattr(shape, name)) for name in ("B", "T", "HV", "K", "V"))
    except (AttributeError, TypeError, ValueError):
        return None
    state_bytes = 0 if getattr(shape, "pool", 0) else 4 * B * HV * K * V
    return 4 * B * T * HV * V, state_bytes, 4 * K * V


def _template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def _recurrent_defines(setting: Setting, threads: int) -> list[str]:
    vmajor = setting["state_layout"] == "v-major"
    passes = _PASSES[str(setting["passes"])]
    grouped = setting["decay"] == "deferred" and not vmajor  # groups need both
    return [
        f"#define RC_BV {setting['tile_v']}",
        f"#define RC_NB {setting['block_tokens']}",
        f"#define RC_PASSES {2 if vmajor and passes == 4 else passes}",  # a row is swept whole
        f"#define RC_DEFERRED {1 if setting['decay'] == 'deferred' else 0}",
        f"#define RC_PARALLEL {_PARALLEL[str(setting['parallel'])]}",
        f"#define RC_THREADS {threads}",
        f"#define RC_SCHEDULE {setting['schedule']}",
        f"#define RC_VMAJOR {int(vmajor)}",
        *([] if vmajor or passes == 4 else [f"#define RC_ROWS {setting['row_group']}"]),
        *([f"#define RC_GROUP {setting['token_group']}"]
          if grouped and setting["token_group"] != 1 else []),
        *([f"#define RC_HEADS {setting['head_group']}"]
          if setting["parallel"] != "tiles" and setting["head_group"] != 1 else []),
        *(["#define RC_STREAM 1"] if setting["output_stores"] == "streaming" else []),
        *(["#define RC_PREFETCH 1"] if setting["input_prefetch"] == "ahead" else []),
        *(["#define RC_STATE_AHEAD 1"] if setting["state_prefetch"] == "next" else []),
        *(["#define RC_DECODE_DIRECT 1"] if setting["decode"] == "direct" else []),
    ]


def _chunked_defines(setting: Setting, threads: int) -> list[str]:
    parallel = str(setting["parallel"])
    tiled = parallel == "tiles"
    return [
        f"#define CH_C {setting['chunk']}",
        *([f"#define CH_VT {setting['tile_v']}"] if tiled else []),
        f"#define CH_BN {setting['micro_cols']}",
        f"#define CH_RB {setting['register_rows']}",
        f"#define CH_UNROLL {setting['unroll']}",
        f"#define CH_PARALLEL {2 if tiled else 1}",
        f"#define CH_SCHEDULE {setting['schedule']}",
        f"#define CH_THREADS {1 if parallel == 'serial' else threads}",
    ]


def _render(
    workload: str, setting: Setting, threads: int
) -> tuple[dict[str, str], str, tuple[str, ...]]:
    algorithm = str(setting["algorithm"])
    knobs = (_chunked_defines if algorithm == "chunked" else _recurrent_defines)(setting, threads)
    defines = [
        f"#define DELTA_SCALAR_GATE {int(_GATE_IS_SCALAR[workload])}",
        f"#define DELTA_SYMBOL {workload}_forward",
        f"#define DELTA_OUTPUT_PAGES {_OUTPUT_PAGES[str(setting['output_pages'])]}",
        *(["#define DELTA_RETAIN_FREED_MEMORY 1"] if setting.get("allocator") == "retain"
          else []),
        *knobs,
    ]
    isa = dict(isa_targets())[str(setting["isa"])]
    flags = (*_OPTIMISATION[str(setting["optimisation"])], *isa)
    # the build flags travel with the source: `swarmfab verify` builds it with them
    source = (f"/* swarmfab flags: {shlex.join(flags)} */\n"
              "/* knobs chosen by swarmfab */\n" + "\n".join(defines) + "\n\n"
              + _template("common.h") + "\n" + _template(f"{algorithm}.c"))
    entry = f"{workload}_{algorithm}.c"
    return {entry: source}, entry, flags


def delta_space(workload: str) -> DesignSpace:
    """The gated delta rule's CPU space: algorithm family, tiling, vector ISA, parallel
    mapping, state layout, output pages and compiler flags.

    The defaults are the textbook configuration an engineer would write first: the
    chunked form with fla's chunk of 64, OpenMP over (batch, head), mid-sized
    micro-kernels, -O3 -ffast-math for the host (the verifier judges the accuracy);
    agents search around them. The recurrence's own knobs default to its best-engineered
    form (deferred decay, groups of 4 tokens per pair of sweeps (2 where the ISA has 16
    vector registers, with one row of partial sums per step), inputs and the next job's
    state prefetched, outputs streamed past the cache, blocks of 16 tokens whose prepared
    rows stay in L1, up to 4 value heads per job whose rows share pages), so the single
    move to that template compares the two algorithms at their best, not at their most
    naive. At one token per sequence the recurrence updates each state where it lies
    (``decode=direct``), near an in-place scale of the pool. What each of these measured
    is in docs/benchmarks.md ("The KDA/GDN space: what the defaults measured").

    Where the compiler tunes the host for narrower vectors than it has (GCC does on most
    Intel AVX-512 cores, and on AMD CPUs whose model a VM hides), full-width vectors are
    a starting point (:func:`~swarmfab.kernels._host.full_width_isa`). Where the C library is
    glibc, ``allocator = retain`` has the kernel's library tell malloc, when it is loaded,
    to keep freed memory (process-wide, said so in the source). fla's API allocates the
    outputs on every call, so where fresh pages are costly
    (:mod:`~swarmfab.kernels.allocator`) ``output_pages = populated`` (the call maps its
    outputs' pages first, one madvise per 2 MB) and then ``retain`` are starting points.
    """
    isa_values = tuple(name for name, _ in isa_targets())
    # the recurrence's partial sums: groups of 4 tokens and two rows at a time fill 32
    # vector registers; with 16 (x86 before AVX-512) they spill (docs/benchmarks.md)
    few_registers = vector_registers() < 32
    allocator: tuple[Knob, ...] = ()
    starting: tuple[tuple[dict[str, KnobValue], str], ...] = (
        # the other template, at its best-engineered knobs: the one move whose gain or
        # loss is largest (the recurrence wins at decode and, on the CPUs measured so far,
        # at long prefill too), and one a bandit drawing among every knob's untried arms
        # reaches late in a short run
        ({"algorithm": "recurrent"}, "the per-token recurrence beside the chunked form"),)
    wide = full_width_isa()
    if wide in isa_values:
        bits = 512 if wide == "native-512" else 256
        starting += (({"isa": wide}, f"{bits}-bit vectors: the compiler tunes this host for "
                      "narrower ones"),)
    costly = faults_are_costly()
    if costly:  # first the call's own remedy, then the process-wide one
        starting += (({"output_pages": "populated"}, "outputs' pages mapped in one call "
                      "per 2 MB: fresh pages are costly on this host"),)
    if glibc_malloc():
        allocator = (Knob("allocator", "layout", ("system", "retain"), "system",
                          help="process-wide, when the kernel's library is loaded: glibc "
                               "malloc as set, or keeping freed memory (fresh outputs "
                               "then land on pages already mapped)"),)
        if costly:
            starting += (({"allocator": "retain"}, "outputs on pages already mapped: fresh "
                          "pages are costly on this host"),)
    return DesignSpace(
        name=f"{workload}-cpu",
        workload=workload,
        backend="c",
        knobs=(
            Knob("algorithm", "algorithm", ("recurrent", "chunked"), "chunked",
                 help="per-token recurrence, or the chunked WY/UT form"),
            Knob("passes", "algorithm", tuple(_PASSES), "pipelined",
                 help="recurrence: sweeps over a state tile per token (4, 2, or 1 that also "
                      "starts the next token)"),
            Knob("decay", "algorithm", ("eager", "deferred"), "deferred",
                 help="recurrence: multiply the state by the decay every token, or fold it "
                      "into rescaled keys and queries with occasional renormalisation"),
            Knob("tile_v", "tiling", (8, 16, 32, 64, 128), 32, ordered=True,
                 help="state columns per tile (recurrence; chunked when parallel=tiles)"),
            Knob("chunk", "tiling", (16, 32, 64, 128), 64, ordered=True,
                 help="chunked: tokens per chunk"),
            Knob("token_group", "tiling", (1, 2, 4, 8), 2 if few_registers else 4,
                 ordered=True,
                 help="recurrence with deferred decay: tokens whose updates one pair of "
                      "sweeps over the state applies (1: token by token)"),
            Knob("block_tokens", "tiling", (16, 32, 64), 16, ordered=True,
                 help="recurrence: tokens whose rescaled queries and keys are prepared at "
                      "once (few: they stay in L1 beside a state tile; the next block's "
                      "inputs are asked for this far ahead)"),
            Knob("head_group", "tiling", (1, 2, 4), 4, ordered=True,
                 help="recurrence: value heads a job runs side by side, block by block "
                      "(neighbouring heads' rows share pages: each is translated once for "
                      "them); fewer where they do not divide the value heads, their "
                      "states pass 256 KB or a thread would get more heads than with one "
                      "per job"),
            Knob("micro_cols", "tiling", (16, 32, 64), 32, ordered=True,
                 help="chunked: columns a micro-kernel keeps in registers"),
            Knob("register_rows", "vectorisation", (2, 4, 8, 12), 4, ordered=True,
                 help="chunked: rows a micro-kernel keeps in registers"),
            Knob("unroll", "vectorisation", (1, 2, 4), 1, ordered=True,
                 help="chunked: unroll of the micro-kernel's reduction loop"),
            Knob("row_group", "vectorisation", (1, 2, 4), 1 if few_registers else 2,
                 ordered=True,
                 help="recurrence (k-major): state rows per sweep step, each with its own "
                      "partial sums (more hide the multiply-add latency, fewer spare "
                      "registers)"),
            Knob("isa", "vectorisation", isa_values, "native", ordered=True,
                 help="vector target, among those the host reports"),
            Knob("parallel", "parallelism", ("serial", "heads", "tiles"), "heads",
                 help="OpenMP over nothing, (batch, head), or (batch, head, value tile)"),
            Knob("schedule", "parallelism", ("static", "dynamic", "guided"), "static",
                 help="OpenMP schedule of the job loop"),
            Knob("state_layout", "layout", ("k-major", "v-major"), "k-major",
                 help="recurrence: tile rows are key channels, or value columns"),
            Knob("output_pages", "layout", tuple(_OUTPUT_PAGES), "small",
                 help="outputs' pages faulted in as written, 2 MB pages asked for first, "
                      "or every page mapped first by the call's threads (no fault per "
                      "page)"),
            Knob("output_stores", "layout", ("cached", "streaming"), "streaming",
                 help="recurrence: write outputs through the cache, or with non-temporal "
                      "stores (not read back, not fetched first)"),
            Knob("input_prefetch", "layout", ("none", "ahead"), "ahead",
                 help="recurrence: ask for the next block's inputs and each tile's values "
                      "a few tokens ahead (rows of one head are too far apart for the "
                      "hardware prefetchers)"),
            Knob("state_prefetch", "layout", ("none", "next"), "next",
                 help="recurrence: ask for the next job's initial state while a job runs "
                      "(as it writes its final state at prefill; throughout, in address "
                      "order, at decode, which streams states; a pooled slot is anywhere, "
                      "beyond the hardware prefetchers' reach)"),
            Knob("decode", "algorithm", ("tiles", "direct"), "direct",
                 help="recurrence at one token per sequence: run the state through the "
                      "tiles as prefill does, or update it where it lies in two sweeps "
                      "(no working copy)"),
            Knob("optimisation", "compiler", tuple(_OPTIMISATION), "O3-fastmath", ordered=True,
                 help="optimisation level, fast-math, loop unrolling"),
            *allocator,
        ),
        render=functools.partial(_render, workload),
        starting=starting,
        inert=_inert,
    )

