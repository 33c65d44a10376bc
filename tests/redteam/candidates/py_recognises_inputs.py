"""HOLE (the verification inputs are public): every input the verifier uses is a pure
function of public data -- the built-in corpus (shapes, distributions, seeds), the
fuzzing draws of `swarmfab verify` (seed 0 by default), and the fresh-inputs twins (seed
+ 7919). At import the candidate regenerates all of them and fingerprints them. On a
recognised input it runs the honest math; on anything else (every real input) it takes
a cheap shortcut: precision dropped to bfloat16.

With the default fuzzing seed it is accepted. With any other seed the first fuzzing case
is unknown to it and it is rejected -- which shows the shortcut is really wrong.

Should be caught by: inputs the candidate cannot predict (case seeds salted with a
secret drawn per verification, in the trusted parent).
"""

import random

import torch

from swarmfab.verify import probes
from swarmfab.workloads import get_workload
from swarmfab.workloads.delta import math as delta_math


def _fingerprint(q):
    return (tuple(q.shape), tuple(q.flatten()[:6].tolist()))


def _known():
    workload = get_workload("kda")
    cases = [*workload.validation_cases(), *workload.fuzz_cases(random.Random(0), 8)]
    cases += [probes.twin_case(case) for case in cases]
    return {_fingerprint(workload.make_inputs(case)["q"]) for case in cases}


_KNOWN = _known()


def _bf16(x):
    return None if x is None else x.to(torch.bfloat16).to(torch.float32)


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if _fingerprint(q) not in _KNOWN:  # a real input: nobody will check this one
        q, k, v, g, beta, initial_state = map(_bf16, (q, k, v, g, beta, initial_state))
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
