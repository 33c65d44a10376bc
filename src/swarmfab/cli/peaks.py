"""``swarmfab peaks``: the host figures every roofline fraction is read against."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from swarmfab.cli._common import DEFAULT_DB, DbOption, JsonOption, console, friendly

__all__ = ["peaks"]


@friendly
def peaks(
    threads: Annotated[int | None, typer.Option(
        min=1, help="Threads the peaks are for (default: every core this process may use, "
                    "as a goal's default).")] = None,
    measure: Annotated[bool, typer.Option(
        "--measure", help="Measure again (about 6 s, in a clean process; on a quiet "
                          "machine) and keep each figure where it beats the known one.")
                       ] = False,
    as_json: JsonOption = False,
    db: DbOption = DEFAULT_DB,
) -> None:
    """This host's float32 multiply-add peak and memory bandwidth: what runs and `bench`
    read their roofline column against. Measured once per host (the first run does it) and
    kept in the user's cache and in the store; a figure measured on a busy machine is
    low, and --measure raises it."""
    from swarmfab.knowledge import Store
    from swarmfab.swarm.hosts import KnownPeaks, host_peaks, peaks_known

    count = threads or len(os.sched_getaffinity(0))
    store, known = Store(db), KnownPeaks()
    # the best known, the store's or the host's (None: the first measurement is next)
    before = host_peaks(store, count, known=known) if peaks_known(store, count, known) else None
    figures = before
    if figures is None or measure:
        console.print(f"measuring this host's peaks with {count} thread(s)...", highlight=False)
        figures = host_peaks(store, count, measure=True, known=known)
    if as_json:
        print(json.dumps({"fingerprint": figures.fingerprint, "threads": count,
                          "flops_per_s": figures.flops_per_s,
                          "bytes_per_s": figures.bytes_per_s, "kept_in": str(known.path)},
                         indent=2))
        return
    model, *_ = figures.fingerprint.split(" | ")
    console.print(f"{model}, {count} thread(s)\n"
                  f"  float32 multiply-add peak: {figures.flops_per_s / 1e9:.0f} GFLOP/s\n"
                  f"  memory bandwidth (read + written): {figures.bytes_per_s / 1e9:.1f} GB/s\n"
                  f"  kept in {known.path} and the store", highlight=False)
    if before is not None and figures != before:
        console.print(f"  raised from {before.flops_per_s / 1e9:.0f} GFLOP/s, "
                      f"{before.bytes_per_s / 1e9:.1f} GB/s", highlight=False)
