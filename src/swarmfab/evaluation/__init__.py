"""Evaluation: the pipeline from a candidate to a verdict (build, verify, benchmark)."""

from swarmfab.evaluation._evaluator import REGRESSION_EPSILON, Evaluator, SideBySide
from swarmfab.evaluation._worker import Implementation

__all__ = ["REGRESSION_EPSILON", "Evaluator", "Implementation", "SideBySide"]
