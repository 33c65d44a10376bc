"""A shape's roofline bound, with its memory term timed beside the implementations.

A host's memory bandwidth is not one number: on a shared VM it moved with the neighbours'
load (a 2-core Zen 4 read 32-96 GB/s for the same copy over a few minutes), and an update
in place outruns a copy (it pays no read for ownership of the lines it writes). A bound
from stored peaks is then a different bound from one table to the next. So where a shape
is memory-bound (its compulsory bytes at the stored bandwidth take longer than its FLOPs
at the peak rate), the evaluator times :data:`MEMORY_STREAM`, an in-place update moving
the shape's compulsory bytes (half read, half written), in the same rounds as the
implementations: the memory term of the bound is its median, measured under the same
conditions as the times it divides.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

from swarmfab.measure.roofline import HostPeaks
from swarmfab.workloads import AnyShape, Workload, compulsory_bytes

__all__ = ["MEMORY_STREAM", "bound_seconds", "memory_bound", "memory_stream"]

MEMORY_STREAM = "memory-stream"  # the session's name (a reserved implementation name)


def memory_stream(nbytes: float, device: str = "cpu") -> Callable[[], object]:
    """An in-place update of half of ``nbytes``: each call reads and writes them all (no
    read for ownership, as a kernel updating its state in place moves them), on torch's
    own threads."""
    buffer = torch.ones(max(1, int(nbytes) // 8), device=device)
    return lambda: buffer.mul_(1.0)


def memory_bound(workload: Workload, shape: AnyShape, peaks: HostPeaks | None,
                 dtype: str = "float32") -> bool:
    """Whether ``shape``'s bound is its bytes by the stored peaks (then its memory term
    is timed beside the implementations)."""
    flops, nbytes = workload.flops(shape), compulsory_bytes(workload, shape, dtype)
    if peaks is None or flops is None or not nbytes:
        return False
    return nbytes / peaks.bytes_per_s > peaks.compute_bound_seconds(flops)


def bound_seconds(workload: Workload, shape: AnyShape, peaks: HostPeaks | None,
                  stream: Sequence[float] | None = None, dtype: str = "float32"
                  ) -> float | None:
    """The roofline bound of ``shape``: FLOPs at the peak rate or bytes at the memory's
    rate, whichever is longer, the latter the median of ``stream``'s samples where the
    stream was timed beside (else the stored bandwidth); None without the peaks or the
    workload's cost model."""
    flops, nbytes = workload.flops(shape), compulsory_bytes(workload, shape, dtype)
    if peaks is None or flops is None or nbytes is None:
        return None
    if not stream:
        return peaks.bound_seconds(flops, nbytes)
    return max(peaks.compute_bound_seconds(flops), statistics.median(stream))
