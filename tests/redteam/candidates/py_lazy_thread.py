"""EXPLOIT (lazy / asynchronous output): returns zero-filled tensors at once and lets a
background thread fill them in 8 ms later ("the call returns as soon as the work is
queued", so a timer around the call sees almost nothing).

Caught by: the fresh-inputs call, whose outputs are read as soon as it returns (still
zeros: "... (fresh inputs, same buffers)": o matches reference), and by "outputs settled
at return" (the first call's outputs are re-read after a pause and have changed).
"""

import threading
import time

import torch

from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    out_o, out_state = torch.zeros_like(o), torch.zeros_like(state)

    def deliver():
        time.sleep(0.008)
        out_o.copy_(o)
        out_state.copy_(state)

    threading.Thread(target=deliver, daemon=True).start()
    return out_o, out_state if output_final_state else None
