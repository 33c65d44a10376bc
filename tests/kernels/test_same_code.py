"""Which moves run the same code on a shape: at one token per sequence the recurrence
with ``decode = direct`` updates each state where it lies and reads none of its tiles'
knobs, so a move in those alone cannot make a decode shape faster or slower (the gate
leaves such a shape out: ``swarm/gate.py``)."""

from __future__ import annotations

from swarmfab.workloads import Shape, design_space

DECODE = Shape(64, 1, 16, 16, 128, 128, initial_state=True, pool=64)
PREFILL = Shape(1, 4096, 16, 16, 128, 128)


def test_the_tiles_knobs_are_the_same_code_at_decode_and_nothing_else_is() -> None:
    for workload in ("kda", "gdn"):
        space = design_space(workload)
        champion = {**space.default(), "algorithm": "recurrent"}
        tiles = {**champion, "token_group": 8, "tile_v": 64, "decay": "eager"}
        assert space.same_code_on(tiles, champion, DECODE)
        assert not space.same_code_on(tiles, champion, PREFILL)
        assert not space.same_code_on(champion, champion, DECODE)  # no move at all
        # what decode does read
        for knob, value in (("parallel", "serial"), ("isa", "avx2"), ("state_prefetch", "none"),
                            ("optimisation", "O2")):
            moved = {**tiles, knob: value}
            assert not space.same_code_on(moved, champion, DECODE), knob
        # through the tiles (decode=tiles), or the chunked form, every knob counts
        for base in ({**champion, "decode": "tiles"}, space.default()):
            assert not space.same_code_on({**base, "token_group": 8}, base, DECODE)
        # a setting that lacks a knob (an older run's) cannot be told
        partial = {k: v for k, v in champion.items() if k != "decode"}
        assert not space.same_code_on(tiles, partial, DECODE)
