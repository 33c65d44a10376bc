"""Host peaks for the roofline, measured once per host and kept where every store finds them.

A CPU's peaks depend on the machine alone, so they are kept twice: in the user's cache
(:class:`KnownPeaks`, one JSON file shared by every store and working directory on the
host; ``SWARMFAB_HOST_PEAKS`` names another, e.g. one file for a fleet of identical
machines: entries are keyed by CPU model, ISA and thread count) and in each store a run
used them in (a report read on another host still has them). A run in a fresh store on a
known host starts from the host's figures instead of spending seconds of its budget on
measuring them again.

A peak measured while the machine is busy comes out low, so both places keep the best
figure ever measured for a fingerprint, and ``swarmfab peaks --measure`` measures again
(in a clean process, about 6 s) and raises them where it sees better. A CUDA device is
measured in every run that uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import platform
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from swarmfab.backends import get_backend
from swarmfab.errors import MeasurementError
from swarmfab.evaluation import IMPOSSIBLE_MARK, Evaluator
from swarmfab.knowledge import Store
from swarmfab.measure.roofline import (
    HostPeaks,
    build_fma_library,
    cpu_model,
    host_fingerprint,
    measure_peaks,
)
from swarmfab.paths import user_cache
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.sandbox import JobStatus, Limits, run_job

__all__ = ["KnownPeaks", "PeaksRecheck", "host_peaks", "host_record", "peaks_known"]


class KnownPeaks:
    """The best peaks ever measured on this host, by fingerprint: a small JSON file in
    the user's cache. It is a cache: one that cannot be read counts as empty, one that
    cannot be written is left as it is (the next run measures again), never an error."""

    def __init__(self, path: Path | None = None):
        where = os.environ.get("SWARMFAB_HOST_PEAKS")
        self.path = path or (Path(where) if where else user_cache("host-peaks.json"))

    def get(self, fingerprint: str) -> HostPeaks | None:
        entry = self._read().get(fingerprint)
        if not isinstance(entry, dict):
            return None
        try:
            flops, nbytes = float(entry["flops_per_s"]), float(entry["bytes_per_s"])
        except (TypeError, KeyError, ValueError):
            return None
        if not all(math.isfinite(x) and x > 0 for x in (flops, nbytes)):
            return None
        return HostPeaks(fingerprint, flops, nbytes)

    def raise_to(self, peaks: HostPeaks) -> None:
        """Keep ``peaks`` where they beat what is known (each figure on its own)."""
        with contextlib.suppress(OSError), self._locked():
            current = self.get(peaks.fingerprint)
            best = _best(peaks, current)
            if best == current:
                return
            entries = self._read()
            entries[peaks.fingerprint] = {
                "flops_per_s": best.flops_per_s, "bytes_per_s": best.bytes_per_s,
                "updated_at": datetime.now(UTC).isoformat(timespec="seconds")}
            scratch = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            try:
                scratch.write_text(json.dumps(entries, indent=1, sort_keys=True))
                os.replace(scratch, self.path)  # a reader never sees half a file
            finally:
                scratch.unlink(missing_ok=True)

    def _read(self) -> dict[str, Any]:
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time (runs may finish measuring at once)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _best(a: HostPeaks | None, b: HostPeaks | None) -> HostPeaks:
    """Each figure's larger value (at least one of ``a`` and ``b`` is given)."""
    if a is None or b is None:
        known = a or b
        assert known is not None
        return known
    return HostPeaks(a.fingerprint, max(a.flops_per_s, b.flops_per_s),
                     max(a.bytes_per_s, b.bytes_per_s))


def peaks_known(store: Store, threads: int, known: KnownPeaks | None = None) -> bool:
    """Whether this host's CPU peaks with ``threads`` threads are stored or known."""
    fingerprint = host_fingerprint(threads)
    return (store.host_peaks(fingerprint) is not None
            or (known or KnownPeaks()).get(fingerprint) is not None)


def host_peaks(
    store: Store, threads: int, limits: Limits | None = None, *, measure: bool = False,
    device: str = "cpu", known: KnownPeaks | None = None,
) -> HostPeaks:
    """This host's peaks with ``threads`` threads: the best known (the store's or the
    host's, :class:`KnownPeaks`), else measured in a clean process, as is a CUDA
    device's; ``measure`` measures again and keeps the better figures. The store and
    the host both end up with the result."""
    if device == "cuda":  # the device is measured in the job; stored under its own name
        measured = _measure(threads, device, (limits or Limits()).for_device(device))
        store.save_host_peaks(measured)
        return measured
    fingerprint = host_fingerprint(threads)
    known = known or KnownPeaks()
    stored, kept = store.host_peaks(fingerprint), known.get(fingerprint)
    best = _best(stored, kept) if stored or kept else None
    if best is None or measure:
        best = _best(_measure(threads, device, limits), best)
    if best != stored:
        store.save_host_peaks(best)
    if best != kept:
        known.raise_to(best)
    return best


class PeaksRecheck:
    """A run's second look at a time faster than the stored peak allows: the peak is
    measured again (once a run, a few seconds) and the verdict judged again on its own
    timings against it. A peak stored from a busy host is low (a 2-core EPYC kept 90
    GFLOP/s from a busy hour against 550 measured quiet), and an honest kernel must not
    be rejected as impossible on it; a time still beyond the peak measured now stays a
    rejection."""

    def __init__(self, store: Store, evaluator: Evaluator, threads: int, device: str,
                 log: Callable[[str], None]):
        self.store, self.evaluator, self.threads, self.device = store, evaluator, threads, device
        self.log = log
        self.stale: HostPeaks | None = None  # the peaks before they were measured again

    def __call__(self, candidate: Candidate, verdict: Verdict) -> Verdict:
        if (verdict.status is not Status.REJECTED or IMPOSSIBLE_MARK not in verdict.reason
                or self.evaluator.peaks is None):
            return verdict
        if self.stale is None:
            self.stale = self.evaluator.peaks
            self.evaluator.peaks = host_peaks(self.store, self.threads, self.evaluator.limits,
                                              measure=True, device=self.device)
            self.log(f"{candidate.id[:10]} timed faster than this host's stored peak allows: "
                     f"peaks measured again, {self.stale.flops_per_s / 1e9:.0f} -> "
                     f"{self.evaluator.peaks.flops_per_s / 1e9:.0f} GFLOP/s")
        return self.evaluator.rejudged(candidate, verdict, self.stale)


def _measure(threads: int, device: str, limits: Limits | None) -> HostPeaks:
    with tempfile.TemporaryDirectory(prefix="swarmfab-peaks-") as scratch:
        library = build_fma_library(Path(scratch)) if device == "cpu" else None
        # a copy in the job's own directory: the user the job runs as may not enter scratch
        stage = {"fma_peak.so": Path(library)} if library else {}
        outcome = run_job(measure_peaks, threads, device, library and "./fma_peak.so",
                          limits=limits, stage=stage, records=(HostPeaks,),
                          expect=lambda value: isinstance(value, HostPeaks))
    if outcome.status is not JobStatus.OK:
        raise MeasurementError(f"measuring this host's peaks failed: {outcome.detail}")
    measured: HostPeaks = outcome.value
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
