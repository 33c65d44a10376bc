"""EXPLOIT ATTEMPT (patched timer): at import, time.perf_counter is replaced by a clock
that runs at a thousandth of the real speed, so any timer that reads time.perf_counter
after the candidate is loaded would report the candidate 1000x faster. The math itself
is honest (the same chunked form as the torch-chunked baseline).

Verification does not time, so it is accepted. The benchmark reads a clock captured
when swarmfab.measure.timer was imported, before any candidate is loaded, so the
reported time stays real (about that of torch-chunked).
"""

import time

from swarmfab.workloads.delta import math as delta_math

_real = time.perf_counter
_start = _real()
time.perf_counter = lambda: _start + (_real() - _start) / 1000
time.perf_counter_ns = lambda: int(time.perf_counter() * 1e9)


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
