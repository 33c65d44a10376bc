"""Problem files: any PyTorch module in the KernelBench convention, as a workload.

- ``workload.py``: :class:`ProblemWorkload` (the file's ``Model``, a candidate's
  ``ModelNew``, weights shared by name, the float64 reference).
- ``sizes.py``: a file's sizes (its module-level integer literals), halved together to fit
  this host, and the validation cases drawn from them.
"""

from swarmfab.workloads.problem.sizes import MIN_SIZE, Fitted, fit_to_host, halved, problem_sizes
from swarmfab.workloads.problem.workload import (
    ModuleState,
    ProblemWorkload,
    build_module,
    is_problem_source,
)

__all__ = ["MIN_SIZE", "Fitted", "ModuleState", "ProblemWorkload", "build_module",
           "fit_to_host", "halved", "is_problem_source", "problem_sizes"]
