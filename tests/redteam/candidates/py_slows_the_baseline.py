"""EXPLOIT (timing: slowing the others down): at import it rebinds the math the PyTorch
baselines call (``swarmfab.workloads.delta.math.chunked`` and ``.recurrent``) to
copies that do the work ten times, keeping the originals for itself. Wherever the
baselines are loaded into the candidate's process after it, its honest math looks ten
times faster than theirs.

Nothing to catch: every implementation is timed in a process of its own
(``evaluation/_conductor.py``), so the rebinding never reaches a baseline.
"""

from swarmfab.workloads.delta import math as delta_math

_chunked, _recurrent = delta_math.chunked, delta_math.recurrent


def _ten_times(math):
    def slowed(*args, **kwargs):
        for _ in range(9):
            math(*args, **kwargs)
        return math(*args, **kwargs)

    return slowed


delta_math.chunked = _ten_times(_chunked)
delta_math.recurrent = _ten_times(_recurrent)


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = _chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
