"""Verification: comparison with the reference, anti-cheat probes, fuzzing."""

from swarmfab.verify import probes
from swarmfab.verify.compare import compare_outputs
from swarmfab.verify.fuzz import draw_cases

__all__ = ["compare_outputs", "draw_cases", "probes"]
