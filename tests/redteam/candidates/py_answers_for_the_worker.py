"""Escape through the answer: the job's process sends its answer to the trusted parent
as pickled bytes, and plain ``pickle.loads`` calls whatever callable the bytes name. At
import, this candidate finds the job's connection, writes its own "answer" (a pickle
whose payload appends to the file named by $SWARMFAB_REDTEAM_MARKER when unpickled) and
exits before the worker can answer.

The math below is honest, so nothing but the answer gives it away. The test checks that
the file stays untouched and that the verdict says the answer was refused.

Caught by: answers are read with a closed vocabulary (swarmfab.sandbox._wire); the
bytes name ``builtins.exec``, which no answer may contain.
"""

import gc
import multiprocessing.connection
import os
import pickle

from swarmfab.workloads.delta import math as delta_math


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        code = (f"open({self.marker!r}, 'a')"
                ".write('written by the parent, pid ' + str(__import__('os').getpid()))")
        return exec, (code,)


def _answer_for_the_worker(marker):
    for found in gc.get_objects():
        if isinstance(found, multiprocessing.connection.Connection) and found.writable:
            found.send_bytes(pickle.dumps(("ok", _Payload(marker))))
            os._exit(0)


if os.environ.get("SWARMFAB_REDTEAM_MARKER"):
    _answer_for_the_worker(os.environ["SWARMFAB_REDTEAM_MARKER"])


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
