"""EXPLOIT (timing: blatantly fake clock): like py_fake_clock.py, but the rebound
benchmark clock hides *all* of the candidate's time, so each call seems to take only
the harness's own overhead -- microseconds for millions of FLOPs.

Caught by: the evaluator's roofline check: a time more than 2x below the host's
compute bound is flagged "impossible" and rejected.
"""

import swarmfab.measure.timer as _timer
from swarmfab.workloads.delta import math as delta_math

HIDDEN = 1.0  # the clock does not see our time at all

_real = _timer._clock
_hidden = 0.0


def _clock():
    return _real() - _hidden


_timer._clock = _clock


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    global _hidden
    begin = _real()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    _hidden += HIDDEN * (_real() - begin)
    return o, state if output_final_state else None
