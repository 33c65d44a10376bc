"""Evaluation: the pipeline from a candidate to a verdict (build, verify, benchmark)."""

from swarmfab.evaluation._bound import memory_stream
from swarmfab.evaluation._cores import CoreBroker, host_cores
from swarmfab.evaluation._evaluator import (
    REGRESSION_EPSILON,
    Cancelled,
    Evaluator,
    EvaluatorRecipe,
    SideBySide,
)
from swarmfab.evaluation._impossible import IMPOSSIBLE_MARK
from swarmfab.evaluation._limits import TRUSTED_TRITON_CACHE
from swarmfab.evaluation._worker import Implementation, on_device

__all__ = [
    "IMPOSSIBLE_MARK", "REGRESSION_EPSILON", "TRUSTED_TRITON_CACHE", "Cancelled", "CoreBroker",
    "Evaluator", "EvaluatorRecipe", "Implementation", "SideBySide", "host_cores", "memory_stream",
    "on_device",
]
