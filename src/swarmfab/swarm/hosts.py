"""Host peaks for the roofline, kept in the store per host fingerprint.

A peak measured while the machine is busy comes out low, so the store keeps the best
figure ever measured for a fingerprint: each run re-measures (about two seconds) and
raises the stored peaks when it sees better; commands that only read use the stored
figures when there are some.
"""

from __future__ import annotations

import contextlib
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from swarmfab.backends import get_backend
from swarmfab.errors import MeasurementError
from swarmfab.knowledge import Store
from swarmfab.measure.roofline import (
    HostPeaks,
    build_fma_library,
    cpu_model,
    host_fingerprint,
    measure_peaks,
)
from swarmfab.sandbox import JobStatus, Limits, run_job

__all__ = ["host_peaks", "host_record"]


def host_peaks(
    store: Store, threads: int, limits: Limits | None = None, *, refresh: bool = False,
    device: str = "cpu",
) -> HostPeaks:
    """This host's peaks with ``threads`` threads (or its CUDA device's): stored, or
    measured in a clean process."""
    if device == "cuda":  # the device is measured in the job; stored under its own name
        limits = (limits or Limits()).for_device(device)
        stored = None
    else:
        stored = store.host_peaks(host_fingerprint(threads))
    if stored is not None and not refresh:
        return stored
    with tempfile.TemporaryDirectory(prefix="swarmfab-peaks-") as scratch:
        library = build_fma_library(Path(scratch)) if device == "cpu" else None
        outcome = run_job(measure_peaks, threads, device, library, limits=limits,
                          records=(HostPeaks,), expect=lambda value: isinstance(value, HostPeaks))
    if outcome.status is not JobStatus.OK:
        raise MeasurementError(f"measuring this host's peaks failed: {outcome.detail}")
    measured: HostPeaks = outcome.value
    if stored is not None:
        measured = HostPeaks(
            measured.fingerprint,
            max(measured.flops_per_s, stored.flops_per_s),
            max(measured.bytes_per_s, stored.bytes_per_s),
        )
    store.save_host_peaks(measured)
    return measured


def host_record(threads: int, backend: str) -> dict[str, Any]:
    """What a run records about where it ran: the machine, its CPU, the thread count, the
    backend's compiler and ISA, and the Python, torch and swarmfab versions. ``swarmfab
    refresh`` compares a champion's record with this host's to tell whether it still
    applies."""
    import torch

    record = {"machine": platform.machine(), "node": platform.node(), "cpu": cpu_model(),
              "threads": threads, "python": platform.python_version(),
              "torch": torch.__version__, **get_backend(backend).describe()}
    for name, distribution in (("swarmfab", "swarmfab"), ("fla", "fla-core")):
        with contextlib.suppress(metadata.PackageNotFoundError):
            record[name] = metadata.version(distribution)
    return record
