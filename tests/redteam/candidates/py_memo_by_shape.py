"""EXPLOIT (caching by shape): the first result for a shape is memoised and returned for
every later call with the same shapes ("a benchmark calls us with the same batch").

Caught by: the fresh-inputs probe. The second call writes new values into the very same
buffers, so the memoised answer is the old one ("... (fresh inputs, same buffers)":
o matches reference).
"""

from swarmfab.workloads.delta import math as delta_math

_memo = {}


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    key = (q.shape, v.shape, g.shape, None if initial_state is None else initial_state.shape)
    if key not in _memo:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        _memo[key] = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    o, state = _memo[key]
    return o.clone(), state.clone() if output_final_state else None
