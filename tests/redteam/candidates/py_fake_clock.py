"""HOLE (timing: the benchmark clock is reachable): the candidate is timed in its own
process, by swarmfab.measure.timer, which reads the module global `_clock`. At import
the candidate rebinds that global to a clock that stands almost still while the
candidate's own forward runs (90% of its time is hidden). Every other implementation
in the same job is timed truthfully, so the candidate looks ~10x faster than the
torch-chunked baseline while running exactly the same math -- fast enough to win, far
too slow for the roofline's "impossible" check.

Should be caught by: timing that the candidate's process cannot influence (a clock
read outside that process, or a check that the samples add up to the elapsed time).
"""

import swarmfab.measure.timer as _timer
from swarmfab.workloads.delta import math as delta_math

HIDDEN = 0.9  # the share of our own time the clock does not see

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
