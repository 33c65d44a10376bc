"""Evaluation: the pipeline from a candidate to a verdict (build, verify, benchmark)."""

from swarmfab.evaluation._cores import CoreBroker, host_cores
from swarmfab.evaluation._evaluator import REGRESSION_EPSILON, Cancelled, Evaluator, SideBySide
from swarmfab.evaluation._worker import Implementation

__all__ = [
    "REGRESSION_EPSILON", "Cancelled", "CoreBroker", "Evaluator", "Implementation", "SideBySide",
    "host_cores",
]
