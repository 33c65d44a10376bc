"""HOLE (tampering with the worker from Python: verifying another function): `forward`
itself is a fast wrong kernel (it returns zeros). At import, the candidate replaces the
worker's `_call` helper -- through which every verification call (and the benchmark's
sentinel-filled call) goes -- with one that runs swarmfab's own chunked math instead of
whatever forward it is given. The probes and the parent's comparison then judge that
math, and all of them pass; the timing loop calls the zeros kernel.

Should be caught by: "o matches reference" (forward returns zeros). The parent compares
honestly, but on outputs produced by code the candidate chose: the worker's helpers
live in the candidate's process.
"""

import torch

import swarmfab.evaluation._worker as _worker
from swarmfab.workloads.delta import math as delta_math

_original_call = _worker._call


def _honest(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None


def _verified_call(workload, forward, inputs):
    return _original_call(workload, _honest, inputs)


_worker._call = _verified_call


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    batch, _, heads, key_dim = g.shape
    state = torch.zeros(batch, heads, key_dim, v.shape[-1])
    return torch.zeros_like(v), state if output_final_state else None
