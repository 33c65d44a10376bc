"""Whether a process that keeps its freed memory runs this host's large tensors faster.

glibc's malloc serves a large block (above its mmap threshold, at most 32 MiB) with a
fresh ``mmap`` and gives it back on ``free``, so every large tensor a forward allocates
starts on pages the kernel must fault in and zero. What that costs depends on the host:
on a 2-core AMD EPYC VM (torch 2.13, transparent huge pages on madvise only) a fresh 32
MiB tensor took 15 ms to fill against 1.8 ms for the same fill into memory already
touched, and eager LayerNorm on 16x512x1024 ran 18.0 ms, against 4.15 ms once malloc
kept freed memory (no mmap, no trimming). So the module design space's ``allocator``
knob is offered where the C library is glibc, and its default is measured here (the C
kernels' knob of that name sets the same from their library). Every timing session
fixes malloc's thresholds (:func:`fix_malloc_thresholds`), so what a call pays does not
follow what its process freed before.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import time
from collections.abc import Iterable

import torch

__all__ = ["RETAIN_SOURCE", "faults_are_costly", "fix_malloc_thresholds", "glibc_malloc",
           "heap_serves"]

_PROBE_BYTES = 32 * 2**20
# retaining is the default where touching fresh pages costs at least this many times
# touching pages already mapped
COSTLY = 2.0

RETAIN_SOURCE = '''

def _retain_freed_memory():
    """PROCESS-WIDE: glibc's malloc keeps freed memory for reuse instead of returning it
    to the system (large blocks come from the heap, not from fresh mmaps, and the heap is
    never trimmed), so a tensor allocated again lands on pages already mapped: no page
    faults once warm. The process's resident memory stays at its peak. Where the C
    library is not glibc, nothing changes."""
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(-4, 0)  # M_MMAP_MAX: no mmap for large blocks
        mallopt(-1, 2**31 - 1)  # M_TRIM_THRESHOLD: never give the heap back
'''


@functools.cache
def glibc_malloc() -> bool:
    """Whether this process's C library is glibc (it has ``mallopt`` and says so)."""
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    version.restype = ctypes.c_char_p
    return bool(version()) and hasattr(libc, "mallopt")


@functools.cache
def faults_are_costly() -> bool:
    """Whether filling a freshly allocated 32 MiB tensor takes at least :data:`COSTLY`
    times as long as filling it again (median of 5 of each, about 0.1 s)."""
    fresh, again = [], []
    for _ in range(5):
        start = time.perf_counter()
        block = torch.empty(_PROBE_BYTES // 4, dtype=torch.float32).fill_(1.0)
        fresh.append(time.perf_counter() - start)
        start = time.perf_counter()
        block.fill_(2.0)
        again.append(time.perf_counter() - start)
        del block
    return statistics.median(fresh) >= COSTLY * statistics.median(again)


# glibc's largest dynamic mmap threshold (64-bit) and the trim threshold that goes with
# it, and mallopt's names for them
_MMAP_THRESHOLD, _M_MMAP_THRESHOLD = 32 * 2**20, -3
_TRIM_THRESHOLD, _M_TRIM_THRESHOLD = 2 * _MMAP_THRESHOLD, -1


def fix_malloc_thresholds() -> None:
    """glibc's malloc with its thresholds fixed where a long-running process's end up,
    so a session's allocation history cannot decide what its calls pay in page faults.
    As the system sets it, freeing a mapped block raises the mmap threshold to that
    block's size (up to 32 MiB) and the heap's trim threshold to twice that: whether a
    call's blocks come from pages already mapped, or from fresh ones (a 16 MiB output
    faults 4,096 pages, a quarter of a KDA prefill call on a VM), followed what else the
    process had freed before. Fixed at 32 MiB and 64 MiB, blocks under 32 MiB come from
    the heap and stay mapped, larger ones are mapped afresh, in every session alike; an
    implementation that sets malloc itself when it loads (the C space's ``allocator =
    retain``) still has its way. Nothing changes where the C library is not glibc."""
    if glibc_malloc():  # every timing session calls it first
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def heap_serves(blocks: Iterable[int]) -> bool:
    """Whether a call that allocates ``blocks`` (bytes each, all freed before the next
    call) finds them on the heap's pages already mapped in a timing session, whichever
    way malloc is set: each block under the mmap threshold that
    :func:`fix_malloc_thresholds` fixes, and all of them together under half its trim
    threshold, so that freed back into the top of the heap beside whatever else lies free
    there they do not reach it (blocks of 31 MiB, 31 MiB and 2 MiB were given back and
    faulted in again on every call). Keeping freed memory then changes nothing such a
    call pays."""
    sizes = list(blocks)
    return all(size < _MMAP_THRESHOLD for size in sizes) and sum(sizes) < _TRIM_THRESHOLD // 2
