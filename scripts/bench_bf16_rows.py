"""Where bfloat16 pays for a module's GEMMs on this CPU, by the number of rows a call has.

The dense example's MLP (``examples/models/make.py``: a Llama-style decoder, hidden 512,
intermediate 1408; random weights), called on 1 x ROWS x 512 inputs in float32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)``, the two in alternating rounds of one
process: per row count, each form's median time with its 95% CI and the paired speedup
of bfloat16 over float32. What ``precision = bfloat16`` in a problem file's design space
leaves in float32 (``kernels/module.py``, ``BF16_MIN_ROWS``) comes from this table.

    python scripts/bench_bf16_rows.py [--threads N] [--rounds 21]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

from swarmfab.measure.stats import median_ci, paired_ratio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))
from make import DENSE

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 512)


def seconds(call: Callable[[], object], repeats: int) -> float:
    began = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - began) / repeats


def _rounds(plain: Callable[[], object], low: Callable[[], object], rounds: int
            ) -> tuple[list[float], list[float]]:
    """Each form's seconds per call in ``rounds`` alternating rounds (the order flips
    every round), after a warm-up; a round is as many calls as take about 20 ms of the
    float32 form."""
    repeats = max(1, int(0.02 / max(seconds(plain, 3), 1e-6)))
    seconds(plain, repeats)
    seconds(low, repeats)
    times: tuple[list[float], list[float]] = ([], [])
    for round_ in range(rounds):
        for form in ((0, 1) if round_ % 2 == 0 else (1, 0)):
            times[form].append(seconds((plain, low)[form], repeats))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mlp = LlamaMLP(LlamaConfig(**DENSE)).eval()

    def reduced(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return mlp(x)

    print(f"LlamaMLP 512 -> 1408 -> 512, {args.threads} thread(s), torch {torch.__version__}, "
          f"{args.rounds} alternating rounds")
    print(f"{'rows':>5} {'float32 ms':>22} {'bfloat16 ms':>22} {'bfloat16 speedup':>22}")
    with torch.no_grad():
        for rows in ROWS:
            x = torch.randn(1, rows, 512)
            plain, low = _rounds(functools.partial(mlp, x), functools.partial(reduced, x),
                                 args.rounds)
            a, b = median_ci(plain), median_ci(low)
            ratio = paired_ratio(plain, low)
            print(f"{rows:>5} {a.median * 1e3:8.3f} [{a.low * 1e3:.3f}, {a.high * 1e3:.3f}]"
                  f" {b.median * 1e3:8.3f} [{b.low * 1e3:.3f}, {b.high * 1e3:.3f}]"
                  f" {ratio.median:8.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]")


if __name__ == "__main__":
    main()
