"""HOLE (timing: knows when it is checked): an honest kernel whenever its result is looked
at, a cheap wrong one whenever it is only timed. It walks the Python stack of the call:

- called from the verification probes, or from the benchmark's sentinel-filled call:
  honest;
- called from the timing loop (`time_interleaved` / `_warm_up`): cheap (the first
  quarter of the tokens only; the rest of o is zeros) -- *unless* the call goes through
  the benchmark's spy (`_Spy`) and it is the very call the spy keeps (`count == pick`),
  which it reads from the spy's own attributes. The "secret" random pick lives in the
  candidate's process, so it is no secret.

Verification and the timed-call check see only honest calls; the timing sees only cheap
ones, so it would win any benchmark while being wrong on every timed call but one.

Should be caught by: running the checked calls where the candidate cannot tell them
from timed ones (the pick and the spy out of the candidate's process, or checking the
outputs of every timed sample's last call, or of several random ones).
"""

import sys

import torch

from swarmfab.workloads import _delta_math


def _only_timed():
    timed = False
    frame = sys._getframe(2)
    while frame is not None:
        code, spy = frame.f_code.co_name, frame.f_locals.get("self")
        if code == "__call__" and type(spy).__name__ == "_Spy" and spy.count == spy.pick:
            return False  # the one timed call whose outputs are kept and checked
        timed = timed or code in ("time_interleaved", "_warm_up")
        frame = frame.f_back
    return timed


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if not _only_timed():
        o, state = _delta_math.chunked(q, k, v, g, beta, scale, initial_state)
        return o, state if output_final_state else None
    part = max(1, q.shape[1] // 4)  # nobody is looking: a quarter of the work
    o = torch.zeros_like(v)
    o[:, :part], state = _delta_math.chunked(
        q[:, :part], k[:, :part], v[:, :part], g[:, :part], beta[:, :part], scale,
        initial_state,
    )
    return o, state if output_final_state else None
