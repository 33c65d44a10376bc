"""A toy design space for agent tests: small enough to enumerate, every knob rendered."""

from __future__ import annotations

import pytest

from swarmfab.kernels import DesignSpace, Knob, Setting


def _render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
    text = "".join(f"#define {name.upper()} {value}\n" for name, value in setting.items())
    return {"k.c": text + f"/* {threads} threads */\n"}, "k.c", ("-O2",)


@pytest.fixture
def toy_space() -> DesignSpace:
    return DesignSpace("toy", "kda", "c", (
        Knob("algorithm", "algorithm", ("a", "b"), "a"),
        Knob("tile", "tiling", (8, 16, 32, 64), 16, ordered=True),
        Knob("chunk", "tiling", (16, 32, 64), 32, ordered=True),
        Knob("parallel", "parallelism", ("serial", "heads", "tiles"), "tiles"),
    ), _render)
