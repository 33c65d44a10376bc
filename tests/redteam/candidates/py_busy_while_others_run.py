"""EXPLOIT (timing: slowing the others down from its own process): honest math, but
once it is being benchmarked (it looks for the harness's serving loop on its stack,
so verification never sees it) it starts a thread that spins whenever it is not
called, stealing the cores while the incumbent is timed.

Caught by: before each sample the conductor waits until no thread of any other
implementation's process is running; one still running 100 ms later fails the shape
("... kept running ...").
"""

import sys
import threading

from swarmfab.workloads.delta import math as delta_math

_state = {"spinning": False, "inside": False}


def _spin():
    while True:
        if not _state["inside"]:
            sum(range(1000))


def _benchmarked():
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "serve_implementation":
            return True
        frame = frame.f_back
    return False


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    if not _state["spinning"] and _benchmarked():
        _state["spinning"] = True
        threading.Thread(target=_spin, daemon=True).start()
    _state["inside"] = True
    try:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    finally:
        _state["inside"] = False
    return o, state if output_final_state else None
