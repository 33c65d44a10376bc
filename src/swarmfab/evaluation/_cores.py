"""Core leases: which cores a piece of evaluation work may run on, exclusively.

Every build and every sandboxed job of an evaluation runs on cores leased here, and no
two leases ever share a core. So when several evaluations run at once, a benchmark never
shares a core with another benchmark, nor with a build or a verification: its timings
mean what they would on an idle machine. Work that cannot get enough free cores waits.

The broker also keeps the time during which no core was leased at all: the share of a
search's wall time that went to the platform itself (proposing, recording, judging)
rather than to building, verifying or timing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

__all__ = ["CoreBroker", "host_cores", "pinned_thread"]


def host_cores() -> tuple[int, ...]:
    """The cores this process may run on (its affinity mask, not the machine's total)."""
    return tuple(sorted(os.sched_getaffinity(0)))


class CoreBroker:
    """Hands out disjoint sets of cores; thread-safe."""

    def __init__(self, cores: Sequence[int] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.cores = tuple(cores) if cores is not None else host_cores()
        if not self.cores:
            raise ValueError("a core broker needs at least one core")
        self._clock = clock
        self._free = list(self.cores)
        self._changed = threading.Condition()
        self._leases = 0
        self._idle_s = 0.0
        self._idle_since: float | None = clock()

    @contextlib.contextmanager
    def lease(self, count: int) -> Iterator[tuple[int, ...]]:
        """Hold ``count`` cores (at most all of them) until the block ends."""
        count = max(1, min(count, len(self.cores)))
        with self._changed:
            self._changed.wait_for(lambda: len(self._free) >= count)
            taken = tuple(self._free[:count])
            del self._free[:count]
            if self._leases == 0 and self._idle_since is not None:
                self._idle_s += self._clock() - self._idle_since
                self._idle_since = None
            self._leases += 1
        try:
            yield taken
        finally:
            with self._changed:
                self._free.extend(taken)
                self._free.sort()
                self._leases -= 1
                if self._leases == 0:
                    self._idle_since = self._clock()
                self._changed.notify_all()

    def idle_seconds(self) -> float:
        """Total time so far during which no core was leased."""
        with self._changed:
            open_idle = 0.0 if self._idle_since is None else self._clock() - self._idle_since
            return self._idle_s + open_idle


@contextlib.contextmanager
def pinned_thread(cores: Sequence[int]) -> Iterator[None]:
    """Run the calling thread (and the processes it starts) on ``cores`` for the block.

    On Linux an affinity set with pid 0 applies to the calling thread only, so other
    threads of this process are not moved.
    """
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
