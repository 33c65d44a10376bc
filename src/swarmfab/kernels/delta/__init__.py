"""CPU design spaces of the gated delta rule family (KDA, GDN): one template, its knobs.

Both workloads share ``recurrent.c``; a workload only sets how its gate is laid out and
the name of its entry point, so the agents, knobs and search are the same.
"""

from __future__ import annotations

import functools
from importlib import resources

from swarmfab.kernels._space import DesignSpace, Knob, Setting

__all__ = ["recurrent_space"]

_GATE_IS_SCALAR = {"kda": False, "gdn": True}

_FLAGS = {
    "O2": ("-O2",),
    "O3-native": ("-O3", "-march=native"),
    "O3-native-fastmath": ("-O3", "-march=native", "-ffast-math"),
}
_PARALLEL = {"serial": 0, "heads": 1, "tiles": 2}


def _template() -> str:
    return resources.files(__package__).joinpath("recurrent.c").read_text()


def _render(
    workload: str, setting: Setting, threads: int
) -> tuple[dict[str, str], str, tuple[str, ...]]:
    defines = [
        f"#define DELTA_SCALAR_GATE {int(_GATE_IS_SCALAR[workload])}",
        f"#define DELTA_SYMBOL {workload}_forward",
        f"#define KDA_BV {setting['tile_v']}",
        f"#define KDA_FUSED {1 if setting['passes'] == 'fused' else 0}",
        f"#define KDA_PARALLEL {_PARALLEL[str(setting['parallel'])]}",
        f"#define KDA_THREADS {threads}",
    ]
    source = "/* knobs chosen by swarmfab */\n" + "\n".join(defines) + "\n\n" + _template()
    entry = f"{workload}_recurrent.c"
    return {entry: source}, entry, _FLAGS[str(setting["flags"])]


def recurrent_space(workload: str) -> DesignSpace:
    """Per-token recurrence with the state tiled by value columns.

    The defaults are the plain, portable choice an engineer would write first (fused
    passes, OpenMP over tiles, -O3 for the host); agents search around them.
    """
    return DesignSpace(
        name=f"{workload}-cpu-recurrent",
        workload=workload,
        backend="c",
        knobs=(
            Knob("tile_v", "tiling", (8, 16, 32, 64, 128), 32, ordered=True,
                 help="state columns per tile (a tile stays in cache for the whole sequence)"),
            Knob("passes", "algorithm", ("fused", "separate"), "fused",
                 help="two fused passes over the tile per token, or four separate ones"),
            Knob("parallel", "parallelism", ("serial", "heads", "tiles"), "tiles",
                 help="OpenMP over nothing, (batch, head), or (batch, head, tile)"),
            Knob("flags", "compiler", tuple(_FLAGS), "O3-native", ordered=True,
                 help="optimisation level, host ISA, fast-math"),
        ),
        render=functools.partial(_render, workload),
    )
