"""Executors: where evaluations run while the run loop goes on proposing and judging.

An executor takes a candidate (with the incumbents it must beat, the fresh fuzz cases
drawn for it and any baselines to time beside it) and returns a future
:class:`Evaluation`. The run loop keeps up to
``capacity`` evaluations in flight and handles each result, in its own thread, as it
completes: recording, the corpus and the gate stay single-threaded.

``LocalExecutor`` (the default) runs evaluations on a pool of threads of this process;
each thread drives one evaluation's sandboxed jobs. Cores are leased by the evaluator's
:class:`~swarmfab.evaluation.CoreBroker`, so a benchmark never shares a core with any
other work, and the pool's default size is how many benchmarks fit side by side on the
host (its cores divided by the goal's threads per benchmark).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import torch

from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.records import Candidate, Verdict
from swarmfab.workloads import Case

__all__ = ["Beside", "Evaluation", "Executor", "ExecutorFactory", "LocalExecutor",
           "default_workers"]

# per target shape's label, baselines timed in the candidate's rounds but not judged
# against (see ``Evaluator.evaluate``)
Beside = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A verdict, and the case that broke the candidate if it was one of the fresh fuzz
    cases (exactly as it was run, so the corpus can keep it)."""

    candidate: Candidate
    verdict: Verdict
    counterexample: Case | None = None


class Executor(Protocol):
    """What the run loop needs from an executor."""

    capacity: int  # how many evaluations may be in flight at once
    # whether evaluations run on the run's evaluator's own cores (then the time those cores
    # sit idle during the search is the platform's overhead; elsewhere it is not measured)
    on_this_host: bool

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        """Start evaluating ``candidate``; the future raises ``Cancelled`` if the run stops
        first, and a ``SwarmfabError`` if the platform (not the candidate) failed."""
        ...

    def describe(self) -> str:
        """Where evaluations run, in a few words for the log."""
        ...

    def cancel(self) -> None:
        """Stop every evaluation in flight (they end without a verdict)."""
        ...

    def close(self) -> None:
        """Release the workers; in-flight evaluations finish or are cancelled first."""
        ...


# (the run's evaluator, the goal's workers or None) -> an executor, made when the search
# starts: after the references and the host's peaks exist
ExecutorFactory = Callable[[Evaluator, "int | None"], Executor]


def default_workers(cores: int, threads: int) -> int:
    """As many workers as benchmarks of ``threads`` threads fit side by side."""
    return max(1, cores // max(1, threads))


class LocalExecutor:
    """Evaluations on a pool of threads of this process, on leased cores."""

    def __init__(self, evaluator: Evaluator, workers: int | None = None):
        self.evaluator = evaluator
        self.on_this_host = True
        self.capacity = workers or default_workers(len(evaluator.cores.cores), evaluator.threads)
        if evaluator.device == "cuda":  # one device: two benchmarks on it would disturb both
            self.capacity = 1
        self._pool = ThreadPoolExecutor(self.capacity, thread_name_prefix="swarmfab-worker")
        # with several workers, references computed in this process must stay on their
        # worker's leased cores: no intra-op thread pool spilling onto other cores
        self._torch_threads = torch.get_num_threads()
        if self.capacity > 1:
            torch.set_num_threads(1)

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        return self._pool.submit(self._evaluate, candidate, dict(incumbents), tuple(extra_cases),
                                 beside)

    def _evaluate(self, candidate: Candidate, incumbents: dict[str, Implementation],
                  extra_cases: tuple[Case, ...], beside: Beside | None) -> Evaluation:
        verdict = self.evaluator.evaluate(candidate, incumbents, extra_cases, beside)
        failed = verdict.failed_check
        found = self.evaluator.case_of(failed, extra_cases) if failed is not None else None
        return Evaluation(candidate, verdict, found)

    def describe(self) -> str:
        return (f"{self.capacity} evaluation(s) at a time on this host's "
                f"{len(self.evaluator.cores.cores)} core(s), {self.evaluator.threads} "
                "thread(s) per benchmark")

    def cancel(self) -> None:
        self.evaluator.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.evaluator.resume()  # the evaluator takes work again (the closing benchmark)
        torch.set_num_threads(self._torch_threads)
