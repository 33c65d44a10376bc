"""The gated delta rule family, every form of one operator side by side.

- ``rule.py``: :class:`GatedDeltaRule`, the workload (inputs, reference, tolerances,
  baselines, the C candidates' calling convention); ``kda.py`` and ``gdn.py`` name its two
  members (a decay per key channel, one decay per head).
- ``math.py``: the recurrent and chunked (WY/UT) formulations in PyTorch.
- ``reference.py`` + ``reference.c``: the float64 recurrence, compiled once per host.
- ``pool.py``: states in a pool, updated in place at given slots (an engine's decode).
- ``fuzz.py``: random validation cases beyond the fixed corpus.
- ``fla.py``, ``ggml.py``: peers' implementations as opt-in baselines.

Nothing is imported here: ``swarmfab.workloads`` imports :mod:`.pool` while it is being
initialised, and the modules above import it back.
"""
