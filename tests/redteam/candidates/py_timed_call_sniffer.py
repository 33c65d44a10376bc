"""HOLE (timing: tells checked calls from timed ones): an honest kernel whenever its
result can be checked, a cheap wrong one whenever it is only timed. It needs no
knowledge of swarmfab's internals, only one observation: a call whose inputs are the
very tensors of the previous call, holding the very same values, is a benchmark
repetition -- nobody learns anything new from its outputs.

- Verification never repeats a call: the fresh-inputs call writes new values into the
  same tensors, and the determinism call uses new tensors. Every call is honest.
- The benchmark's sentinel-filled call is honest (nothing to compare with yet), and so
  is the timed call the spy picks to check: the spy writes the twin case's values into
  the inputs first, so they have changed (and the call after it, when they are put back).
- Every other timed call repeats the previous inputs: it computes the first quarter of
  the tokens only, and leaves the rest of o at zero.

The evaluator accepts it with a speedup it does not have.

Should be caught by: timed calls that do not repeat inputs (rotate several input sets,
or write fresh values before every sample, untimed) with the outputs of random timed
calls checked; or time-and-check calls the kernel cannot tell apart.
"""

import torch

from swarmfab.workloads.delta import math as delta_math

_previous = None


def _key(tensors):
    return tuple((t.data_ptr(), tuple(t.flatten()[:: max(1, t.numel() // 64)].tolist()))
                 for t in tensors if t is not None)


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    global _previous
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    key = _key((q, k, v, g, beta, initial_state))
    repeated, _previous = key == _previous, key
    if not repeated:
        o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
        return o, state if output_final_state else None
    part = max(1, q.shape[1] // 4)  # a repetition: nobody will look at this one
    o = torch.zeros_like(v)
    o[:, :part], state = delta_math.chunked(
        q[:, :part], k[:, :part], v[:, :part], g[:, :part], beta[:, :part], scale,
        initial_state,
    )
    return o, state if output_final_state else None
