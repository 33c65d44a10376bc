"""EXPLOIT (lazy / asynchronous output, warm-up variant): the first call for each shape
returns zero-filled tensors and fills them from a background thread 8 ms later; later
calls are synchronous. A harness that only reads outputs a while after the first call,
and times the later calls, would see correct and fast.

Caught by: "outputs settled at return" (the first call's outputs are copied at return
and re-read after a pause: they changed in between).
"""

import threading
import time

import torch

from swarmfab.workloads.delta import math as delta_math

_seen = set()


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    if q.shape in _seen:
        return o, state if output_final_state else None
    _seen.add(q.shape)
    out_o, out_state = torch.zeros_like(o), torch.zeros_like(state)

    def deliver():
        time.sleep(0.008)
        out_o.copy_(o)
        out_state.copy_(state)

    threading.Thread(target=deliver, daemon=True).start()
    return out_o, out_state if output_final_state else None
