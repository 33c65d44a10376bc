"""Evaluation: the pipeline from a candidate to a verdict (build, verify, benchmark)."""

from swarmfab.evaluation._bound import compulsory_bytes, memory_stream
from swarmfab.evaluation._cores import CoreBroker, host_cores
from swarmfab.evaluation._evaluator import REGRESSION_EPSILON, Cancelled, Evaluator, SideBySide
from swarmfab.evaluation._worker import Implementation

__all__ = [
    "REGRESSION_EPSILON", "Cancelled", "CoreBroker", "Evaluator", "Implementation", "SideBySide",
    "compulsory_bytes", "host_cores", "memory_stream",
]
