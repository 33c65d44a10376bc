"""The delta rule's verification battery: the sizes, values, layouts and threads that
real use reaches and the fast corpus does not.

Every case has K = V = 128, as every Kimi Linear head does. The fast corpus stays small
(every candidate meets it); this runs once before a candidate is crowned, exported or
refreshed, and in ``swarmfab verify``:

- sizes: a prefill of 1,024 tokens over 64 (sequence, value head) pairs with grouped
  values (HV = 4 H), past any tile boundary at 64 and any thread partition that starts
  above 16 pairs; a decode batch of 384 pairs updated in place in a pool;
- values: gates of exactly 0 on a long sequence (no decay: the state only grows), a
  share at -100 and at -inf (exp underflows to 0: an unclamped exp of a difference
  overflows), beta exactly 0 and exactly 1;
- layouts: q, k, v, g and beta as views into wider buffers (split from one fused
  projection, as engines pass them) and column-major;
- packed sequences (``cu_seqlens``): 48 of 4 tokens beside one of 1,024, each from its
  own state;
- threads: one, two and the evaluator's, each call repeated and compared bit for bit.

``SWARMFAB_BATTERY=test`` (:data:`BATTERY_ENV`; the suite sets it for tests that are not
about the verifier, as it sizes timings) runs the cases whose size is what costs at a
test's size, every other property kept: the prefill, the gates of 0 and the long packed
sequence at 130 tokens instead of 1,024 (past the tile boundaries at 64 and 128; the
prefill still over 64 pairs with grouped values), and the decode batch at 96 pairs in a
pool of 32 slots instead of 384 in 128 (in place, at shuffled slots, slots left out):
what a verification costs is mostly these cases. Their names say "test-sized", so a
verdict shows which battery judged it (and a kept verdict of one battery never answers
for the other).
"""

from __future__ import annotations

import os

from swarmfab.workloads._base import Case, Distribution, Shape

__all__ = ["BATTERY_ENV", "battery_cases"]

BATTERY_ENV = "SWARMFAB_BATTERY"
_SEED = 50_000  # away from the corpus's and fuzzing's seeds


def _test_sized() -> bool:
    """Whether :data:`BATTERY_ENV` asks for a test's size (read at each call: a test of
    the verifier unsets it)."""
    return os.environ.get(BATTERY_ENV, "").strip().lower() == "test"


def battery_cases(threads: int) -> list[Case]:
    """The battery for a goal run on ``threads`` threads (the evaluator's count)."""
    sized = _test_sized()
    long = 130 if sized else 1024  # tokens of the long sequences
    batch, pool = (24, 32) if sized else (96, 128)  # decode: sequences, state slots
    decode = Shape(batch, 1, 2, 4, 128, 128, True, pool=pool)
    mark = " (test-sized)" if sized else ""
    mid = Shape(B=2, T=300, H=2, HV=4, K=128, V=128, initial_state=True)
    cases = [
        Case(f"battery: prefill B4 T{long} H4/HV16 K128{mark}",
             Shape(4, long, 4, 16, 128, 128, True), seed=_SEED),
        Case(f"battery: decode in place, {decode.B * decode.HV} pairs{mark}", decode,
             seed=_SEED + 1),
        Case(f"battery: gates exactly 0 over {long} tokens{mark}",
             Shape(1, long, 2, 2, 128, 128), Distribution(gate_fill="0"), seed=_SEED + 2),
        Case("battery: a third of the gates -100", mid,
             Distribution(gate_fill="-100", gate_fill_prob=0.3), seed=_SEED + 3),
        Case("battery: a tenth of the gates -inf", mid,
             Distribution(gate_fill="-inf", gate_fill_prob=0.1), seed=_SEED + 4),
        Case("battery: beta exactly 0", mid, Distribution(beta_fill=0.0), seed=_SEED + 5),
        Case("battery: beta exactly 1", mid, Distribution(beta_fill=1.0), seed=_SEED + 6),
        Case("battery: inputs strided (views of a fused projection)", mid, seed=_SEED + 7,
             layout="strided"),
        Case("battery: inputs column-major", mid, seed=_SEED + 8, layout="transposed"),
    ]
    packed = (4,) * 48 + (long,)  # an engine's prefill: many short requests, one long
    cases.append(Case(f"battery: packed, 48 sequences of 4 tokens and one of {long}{mark}",
                      Shape(1, sum(packed), 2, 4, 128, 128, True, lengths=packed),
                      seed=_SEED + 9))
    spread = Shape(B=3, T=256, H=4, HV=8, K=128, V=128, initial_state=True)  # 24 pairs
    for n in sorted({1, 2, max(1, threads)}):
        cases.append(Case(f"battery: {n} thread(s), 24 pairs", spread, seed=_SEED + 10 + n,
                          threads=n))
    return cases
