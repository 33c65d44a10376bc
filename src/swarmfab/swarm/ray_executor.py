"""The Ray executor: evaluations on the nodes of a Ray cluster.

Each evaluator is a Ray actor that reserves ``threads`` CPUs of its node; it holds its
own :class:`~swarmfab.evaluation.Evaluator` (own references, own build cache, own secret
salts) whose core leases cover the cores its node process may use, so its benchmarks
never share a core with other work on that node. Give every node the cores it owns
(for instance ``taskset -c 0-7 ray start ...``) and one evaluator per node's worth of
CPUs, and no two benchmarks ever meet on a core.

The run loop stays on the driver: it submits a candidate with the incumbents it must
beat (a champion travels as its source, built again where it runs) and the corpus as it
stands, and receives the verdict. An actor lost with its node has its evaluation
re-queued on a surviving one; verdicts already recorded are in the store and stay.
"""

from __future__ import annotations

import dataclasses
import queue
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swarmfab.errors import ClusterError, import_extra
from swarmfab.evaluation import Cancelled, Evaluator, EvaluatorRecipe, Implementation
from swarmfab.records import Candidate
from swarmfab.swarm.executors import Beside, Evaluation, default_workers
from swarmfab.workloads import Case

__all__ = ["RayExecutor"]

POLL_S = 0.2  # how often a waiting evaluation looks for cancellation
PLACEMENT_S = 300.0  # how long evaluators may take to start (imports, references)


class _EvaluatorActor:
    """Lives in a Ray worker process on some node; evaluates one candidate at a time."""

    def __init__(self, recipe: EvaluatorRecipe):
        self._cache = Path(tempfile.mkdtemp(prefix="swarmfab-ray-"))
        self.evaluator = recipe.build(self._cache / "cache", [])
        self.evaluator.prepare()

    def where(self) -> dict[str, Any]:
        import ray

        return {"node": ray.get_runtime_context().get_node_id(),
                "cores": list(self.evaluator.cores.cores)}

    def evaluate(self, candidate: Candidate, incumbents: dict[str, Implementation],
                 corpus: list[Case], extra_cases: tuple[Case, ...],
                 beside: Beside | None = None) -> Evaluation:
        self.evaluator.cases = list(corpus)
        here = {shape: self._here(impl) for shape, impl in incumbents.items()}
        verdict = self.evaluator.evaluate(candidate, here, extra_cases, beside)
        failed = verdict.failed_check
        found = self.evaluator.case_of(failed, extra_cases) if failed is not None else None
        return Evaluation(candidate, verdict, found)

    def _here(self, impl: Implementation) -> Implementation:
        """An incumbent built on this node (a champion is rebuilt from its source)."""
        if impl.source is None:
            return impl
        return dataclasses.replace(impl, artifact=self.evaluator.build(impl.source))


class RayExecutor:
    """Evaluations on Ray actors; one evaluation per actor at a time."""

    def __init__(self, evaluator: Evaluator, address: str = "auto", workers: int | None = None):
        ray = import_extra("ray", "ray", "--executor ray")

        self._ray = ray
        self.evaluator = evaluator  # the driver's: its corpus is the one that grows
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot connect to the Ray cluster at {address!r}: {exc}; "
                               "start one with `ray start --head` or pass --address "
                               "HOST:PORT") from exc
        cpus = int(ray.cluster_resources().get("CPU", 0))
        count = workers or default_workers(cpus, evaluator.threads)
        remote = ray.remote(num_cpus=evaluator.threads, max_restarts=0)(_EvaluatorActor)
        recipe = evaluator.recipe()
        actors: list[Any] = [remote.remote(recipe) for _ in range(count)]
        self.placement = self._place(actors, cpus)
        self._idle: queue.Queue[Any] = queue.Queue()
        for actor in actors:
            self._idle.put(actor)
        self._alive = count
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self.capacity = count
        self.on_this_host = False  # the actors' cores are not the driver's
        self.requeued = 0  # evaluations moved to another actor after theirs was lost
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="swarmfab-ray")

    def _place(self, actors: list[Any], cpus: int) -> list[dict[str, Any]]:
        """Wait until every evaluator is up (references computed) and say where it is."""
        refs = [actor.where.remote() for actor in actors]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=PLACEMENT_S)
        if len(ready) < len(refs):
            for actor in actors:
                self._ray.kill(actor)
            raise ClusterError(
                f"only {len(ready)} of {len(refs)} evaluators started within {PLACEMENT_S:.0f} s"
                f" (the cluster has {cpus} CPU(s); each evaluator reserves "
                f"{self.evaluator.threads}); lower --workers or add nodes")
        try:
            return list(self._ray.get(refs))
        except self._ray.exceptions.RayError as exc:
            raise ClusterError(f"an evaluator failed to start on the cluster: {exc}") from exc

    def submit(self, candidate: Candidate, incumbents: dict[str, Implementation],
               extra_cases: Sequence[Case], beside: Beside | None = None
               ) -> Future[Evaluation]:
        corpus = list(self.evaluator.cases)
        portable = {shape: dataclasses.replace(impl, artifact=None) if impl.source else impl
                    for shape, impl in incumbents.items()}
        return self._pool.submit(self._evaluate, candidate, portable, corpus, tuple(extra_cases),
                                 beside)

    def _evaluate(self, candidate: Candidate, incumbents: dict[str, Implementation],
                  corpus: list[Case], extra_cases: tuple[Case, ...],
                  beside: Beside | None) -> Evaluation:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        while True:
            actor = self._take_actor()
            try:
                evaluation: Evaluation = self._get(
                    actor.evaluate.remote(candidate, incumbents, corpus, extra_cases, beside),
                    actor)
            except (RayActorError, ActorDiedError, ActorUnavailableError):
                self._lost(actor)
                continue  # re-queued on a surviving actor
            self._idle.put(actor)
            return evaluation

    def _take_actor(self) -> Any:
        while True:
            if self._cancel.is_set():
                raise Cancelled("the run is stopping")
            with self._lock:
                if self._alive == 0:
                    raise ClusterError("every Ray evaluator is lost (their nodes died); "
                                       "the verdicts recorded so far are kept")
            try:
                return self._idle.get(timeout=POLL_S)
            except queue.Empty:
                continue

    def _get(self, ref: Any, actor: Any) -> Any:
        """The result of ``ref``, polling so that cancellation is noticed."""
        while True:
            ready, _ = self._ray.wait([ref], timeout=POLL_S)
            if ready:
                return self._ray.get(ready[0])
            if self._cancel.is_set():
                if actor is not None:
                    self._idle.put(actor)  # its job finishes on its own; nobody waits for it
                raise Cancelled("the run is stopping")

    def _lost(self, actor: Any) -> None:
        with self._lock:
            self._alive -= 1
            self.capacity = max(1, self._alive)
            self.requeued += 1

    def describe(self) -> str:
        nodes = {spot["node"] for spot in self.placement}
        return (f"{self.capacity} Ray evaluator(s) on {len(nodes)} node(s), "
                f"{self.evaluator.threads} CPU(s) each")

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        while not self._idle.empty():
            self._ray.kill(self._idle.get())
