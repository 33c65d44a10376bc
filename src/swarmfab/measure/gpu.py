"""Timing on a CUDA device: events around the whole device, the L2 flushed before a sample.

A sample starts after a device-wide synchronisation and ends with another one, and the
CUDA events are recorded around both: work a kernel leaves running on a side stream (a
stream the caller never waits on) is inside the measurement, so it cannot make a
candidate look fast. The L2 cache is overwritten before every sample, untimed, so every
implementation starts cold, as it would between layers of a model. The rounds, their
rotation and the adaptive stopping rule are the CPU protocol's (:mod:`.timer`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DEFAULT_L2_BYTES", "DeviceStopwatch", "l2_flush_bytes"]

DEFAULT_L2_BYTES = 50 * 2**20  # H100 and H200 (the device reports its own)
_FLUSH_FACTOR = 2  # write twice the L2: a cache with any replacement policy is evicted
_FLUSH_ALIGN = 2**20


def l2_flush_bytes(l2_bytes: int | None) -> int:
    """Bytes to write so nothing of an earlier call is left in an L2 of ``l2_bytes``:
    twice its size, rounded up to a MiB (a device that reports no L2 gets the H200's)."""
    size = l2_bytes if l2_bytes and l2_bytes > 0 else DEFAULT_L2_BYTES
    wanted = _FLUSH_FACTOR * size
    return -(-wanted // _FLUSH_ALIGN) * _FLUSH_ALIGN


class DeviceStopwatch:
    """CUDA events around device-wide synchronisations; always cold (L2 flushed)."""

    cold = True

    def __init__(self, device: int | None = None, flush_bytes: int | None = None):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("DeviceStopwatch needs a CUDA device")
        self._torch = torch
        index = torch.cuda.current_device() if device is None else device
        properties = torch.cuda.get_device_properties(index)
        size = flush_bytes or l2_flush_bytes(getattr(properties, "L2_cache_size", None))
        self._flush = torch.empty(size, dtype=torch.uint8, device=index)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def evict(self, round_index: int) -> None:
        self._flush.fill_(round_index & 0xFF)

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        cuda = self._torch.cuda
        cuda.synchronize()  # the flush and anything earlier are done: the device is idle
        self._start.record()
        for _ in range(repeats):
            call()
        cuda.synchronize()  # every stream, not only the one the events are on
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3 / repeats
