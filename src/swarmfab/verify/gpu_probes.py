"""Probes for the exploits that exist only on a GPU.

- Uninitialised outputs that reuse freed memory: PyTorch's caching allocator hands a
  new tensor the memory a freed one had, so a kernel that allocates its output and
  writes nothing may "return" an earlier correct answer (a reference or a baseline's
  output). Verification therefore runs the candidate in a fresh process before anything
  else touches the device, and first fills the allocator's cache with a NaN sentinel:
  whatever the candidate allocates starts as NaN, and any element it never writes fails.
- Work on a side stream: a kernel launched on a stream the caller never waits on
  returns at once and finishes later; :func:`swarmfab.verify.probes.unsettled_outputs`
  re-reads the outputs after a device-wide synchronisation, and the GPU stopwatch
  synchronises the whole device (:mod:`swarmfab.measure.gpu`).
"""

from __future__ import annotations

import math

__all__ = ["SENTINEL", "poison_device_memory", "poison_plan"]

SENTINEL = math.nan
SMALL_BLOCK = 2**20  # PyTorch's small pool serves requests up to 1 MiB from 2 MiB segments
_LARGE_CAP = 16 * 2**30


def poison_plan(free_bytes: int, *, share: float = 0.5, small_blocks: int = 64,
                large_cap: int = _LARGE_CAP) -> list[int]:
    """Block sizes to allocate, fill with the sentinel and free.

    A share of the free device memory (capped) as one large block, which later large
    requests are carved from, plus ``small_blocks`` blocks of 1 MiB, which fill the
    small pool's segments; the small blocks come first and the large block takes what is
    left of the share. Nothing when the device has too little free memory."""
    if free_bytes <= 0 or not 0 < share <= 1:
        return []
    budget = min(int(free_bytes * share), large_cap)
    small = min(small_blocks, budget // SMALL_BLOCK)
    plan = [SMALL_BLOCK] * small
    large = (budget - small * SMALL_BLOCK) // SMALL_BLOCK * SMALL_BLOCK
    if large > SMALL_BLOCK:
        plan.append(large)
    return plan


def poison_device_memory(device: int | None = None) -> int:
    """Fill PyTorch's cache of device memory with the sentinel; returns the bytes filled.

    Cached free blocks are first returned to the driver (one of them, holding an earlier
    answer, would fit a request better than the poison); the poisoned blocks are then
    freed into the cache, not to the driver, so the candidate's own allocations reuse
    them, NaN-filled."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # blocks freed earlier would be a better fit than the poison
    free, _ = torch.cuda.mem_get_info(device)
    blocks = []
    for size in poison_plan(free):
        block = torch.empty(size // 4, dtype=torch.float32, device=device)
        block.fill_(SENTINEL)
        blocks.append(block)
    torch.cuda.synchronize(device)
    filled = sum(block.numel() * 4 for block in blocks)
    del blocks  # back into the caching allocator, still full of NaN
    return filled
