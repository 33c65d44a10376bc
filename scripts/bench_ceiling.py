"""The recurrence's prefill ceiling on this host: how close to the multiply-add peak its
sweeps run with nothing else to do, and what the block's preparation adds.

Renders the design space's default recurrence for this host (its groups and tiles, and
its full vector width where the compiler tunes ``native`` narrower; ``--knobs`` over it),
builds scripts/ceiling.c against that source with the kernel's own flags, and times on
one thread, in interleaved rounds: the roofline's multiply-add loop (measure/fma_peak.c),
a block's sweeps over every tile of a K = V = 128 head with the data in cache, and the
same block prepared first. A kernel that also reads its inputs, solves its groups and
writes its outputs runs below the third figure; the run's roofline column compares with
the first.

    python scripts/bench_ceiling.py [--blocks 400] [--rounds 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from swarmfab.kernels import KnobValue, full_width_isa
from swarmfab.measure.roofline import cpu_model
from swarmfab.workloads import design_space

HARNESS = Path(__file__).with_name("ceiling.c")


def build(directory: Path, knobs: dict[str, KnobValue]) -> tuple[Path, dict[str, KnobValue]]:
    space = design_space("kda")
    # the space's defaults, with the host's full vector width where native code is narrower
    isa = full_width_isa()
    wide: dict[str, KnobValue] = {"isa": isa} if isa else {}
    setting = {**space.default(), "algorithm": "recurrent", **wide, **knobs}
    candidate = space.instantiate(setting, threads=1)
    kernel = directory / "kernel.c"
    kernel.write_text(candidate.sources[candidate.entry])
    binary = directory / "ceiling"
    loop = directory / "fma_peak.c"  # the roofline's own multiply-add loop
    loop.write_text(resources.files("swarmfab.measure").joinpath("fma_peak.c").read_text())
    subprocess.run(["gcc", *candidate.flags, "-fopenmp", f'-DKERNEL="{kernel}"', str(HARNESS),
                    str(loop), "-o", str(binary), "-lm"], check=True, capture_output=True,
                   text=True)
    return binary, setting


def measure(blocks: int, rounds: int, knobs: dict[str, KnobValue]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="swarmfab-ceiling-") as tmp:
        binary, setting = build(Path(tmp), knobs)
        done = subprocess.run([str(binary), str(blocks), str(rounds)], check=True,
                              capture_output=True, text=True, timeout=600)
    rates = {line.split()[0]: [float(x) for x in line.split()[1:]]
             for line in done.stdout.splitlines() if line and not line.startswith("#")}
    loop = rates["fma-loop"]
    result: dict[str, object] = {"host": cpu_model(), "isa": setting["isa"],
                                 "optimisation": setting["optimisation"],
                                 "token_group": setting["token_group"],
                                 "tile_v": setting["tile_v"], "rounds": rounds}
    for name, values in rates.items():
        shares = sorted(v / peak for v, peak in zip(values, loop, strict=True))
        result[name] = {"gflops_median": statistics.median(values),
                        "of_loop_median": statistics.median(shares),
                        "of_loop_range": [shares[0], shares[-1]]}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=400, help="blocks per timing")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--knobs", type=json.loads, default={},
                        help='knobs over the defaults, as JSON: {"isa": "avx2"}')
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        result = measure(args.blocks, args.rounds, args.knobs)
    except ValueError as error:  # a knob or value the space does not have
        parser.error(str(error))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['host']}, one thread, {args.rounds} interleaved rounds; the recurrence "
          f"with isa = {result['isa']}, optimisation = {result['optimisation']}, "
          f"token_group = {result['token_group']}, tile_v = {result['tile_v']}")
    print(f"{'measure':<16} {'GFLOP/s':>8}  {'of the FMA loop (median, range)':<32}")
    for name in ("fma-loop", "sweeps", "sweeps+prepare"):
        row = result[name]
        assert isinstance(row, dict)
        low, high = row["of_loop_range"]
        print(f"{name:<16} {row['gflops_median']:>8.1f}  {row['of_loop_median']:>6.1%} "
              f"[{low:.1%}, {high:.1%}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
