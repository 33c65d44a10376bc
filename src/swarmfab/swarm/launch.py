"""From a goal to a finished run: what ``run``, ``resume``, ``suite`` and ``refresh`` share.

:func:`goal_from_target` reads what a user names (a workload, a goal file, a problem
file) into a :class:`Goal` sized for this host; :func:`execute_goal` assembles the run
(device check, design space, agents, lessons and recalled champions, the evaluator) and
executes it. Progress goes to a ``log`` callback and, for live displays, an ``observer``
of status snapshots: nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from swarmfab.errors import GoalError
from swarmfab.goal import Goal

if TYPE_CHECKING:
    from swarmfab.evaluation import Evaluator
    from swarmfab.kernels import DesignSpace
    from swarmfab.knowledge import LessonContext, Store
    from swarmfab.swarm.executors import ExecutorFactory
    from swarmfab.swarm.run import Run, RunResult
    from swarmfab.swarm.status import RunStatus
    from swarmfab.workloads import AnyShape

__all__ = ["Log", "evaluator_for", "execute_goal", "goal_from_target", "lesson_context",
           "load_target", "require_device", "sized_for_host"]

Log = Callable[[str], None]


def goal_from_target(target: str, log: Log, sizes: str = "auto", **overrides: object) -> Goal:
    """The goal a user names (:func:`load_target`), sized for this host."""
    return sized_for_host(load_target(target, **overrides), sizes, log)


def load_target(target: str, **overrides: object) -> Goal:
    """The goal a user names: a goal TOML file, else a workload name or ``.py`` file with
    its default goal; ``overrides`` (budget, threads, ...) replace its values where given."""
    from swarmfab.goal import default_goal, load_goal

    path = Path(target)
    goal = load_goal(path) if path.suffix == ".toml" else default_goal(target)
    return goal.with_overrides(**overrides)


def sized_for_host(goal: Goal, sizes: str, log: Log) -> Goal:
    """A problem file's goal without [[sizes]]: with ``auto``, its sizes halved together
    until its memory fits this host's share and the eager Model takes at most 0.1 s a
    call here (the sizes are written into the goal, so a resume runs the same); ``as-is``
    keeps the file's. Sizes kept (as-is, or the goal's [[sizes]]) that need more memory
    than this host has are a WorkloadError saying how much, before anything is
    allocated."""
    if sizes not in ("auto", "as-is"):
        raise GoalError(f"--sizes {sizes!r}: choose auto or as-is")
    from swarmfab.workloads import Dims, get_workload
    from swarmfab.workloads.problem import ProblemWorkload, fit_to_host
    from swarmfab.workloads.problem.sizes import require_memory

    problem = get_workload(goal.workload)
    if not isinstance(problem, ProblemWorkload):
        return goal
    if sizes == "as-is" or goal.sizes or goal.shapes:
        for dims in goal.target_shapes():
            if isinstance(dims, Dims):
                require_memory(problem, dims)
        return goal
    fitted = fit_to_host(problem, goal.threads)
    log(f"{problem.path.name}: {fitted.describe(problem.sizes)} (--sizes as-is keeps the "
        "file's)")
    return goal.with_overrides(sizes=[dict(fitted.dims.sizes)])


def require_device(device: str) -> None:
    """A goal for a CUDA device stops here, with the reason, on a host without one."""
    from swarmfab.backends import cuda_device_available

    if device == "cuda" and not cuda_device_available():
        raise GoalError("the goal asks for device = \"cuda\" but this host has no CUDA "
                        "device (torch.cuda.is_available() is False); run it on a GPU host "
                        "or set device = \"cpu\"")


def evaluator_for(goal: Goal, workdir: Path, store: Store,
                  shapes: Sequence[AnyShape] | None = None) -> Evaluator:
    """An evaluator for ``goal`` whose corpus is the built-in cases plus the stored ones."""
    from swarmfab.evaluation import Evaluator
    from swarmfab.sandbox import Limits
    from swarmfab.workloads import DTYPES, Tolerances, get_workload

    workload = get_workload(goal.workload)
    corpus = [*workload.validation_cases(), *store.cases(goal.workload)]
    defaults = workload.tolerances(DTYPES[goal.dtype])
    tolerances = Tolerances(goal.tolerance.rms_ratio or defaults.rms_ratio,
                            goal.tolerance.max_abs or defaults.max_abs_ratio)
    return Evaluator(workload, list(shapes) if shapes else goal.target_shapes(), workdir / "cache",
                     threads=goal.threads, tolerances=tolerances,
                     limits=Limits(wall_s=goal.eval_timeout_s, allow_weak=goal.allow_weak_sandbox),
                     seed=goal.seed, cases=corpus, device=goal.device, dtype=goal.dtype)


def lesson_context(goal: Goal, space: DesignSpace) -> LessonContext:
    """This goal's context for lessons and recall: workload, device class, shape classes."""
    from swarmfab.knowledge import LessonContext
    from swarmfab.swarm.hosts import host_record

    labels = [shape.label for shape in goal.target_shapes()]
    return LessonContext.of(goal.workload, host_record(goal.threads, space.backend), labels)


def execute_goal(goal: Goal, store: Store, workdir: Path, resume: str | None, *,
                 started: float, log: Log, executor: ExecutorFactory | None = None,
                 use_lessons: bool = True,
                 observer: Callable[[RunStatus], None] | None = None) -> tuple[RunResult, Run]:
    """Run the swarm on ``goal``, its budget counting from the monotonic instant
    ``started``; returns the result and the Run (for what it learned when no champion
    came out)."""
    from swarmfab.agents import Agent
    from swarmfab.agents.builtin import (
        RecallAgent,
        RestartAgent,
        StartingPointsAgent,
        bandit_agents,
    )
    from swarmfab.swarm import Run
    from swarmfab.workloads import design_space

    require_device(goal.device)
    space = design_space(goal.workload, goal.device)
    agents: list[Agent] = []
    reviewer = None
    if "llm" in goal.agents:  # first: a bad key or model fails before any work is done
        from swarmfab.agents.llm import llm_agents

        llm, reviewer, _ = llm_agents(goal.llm)
        agents += llm
    builtin = "builtin" in goal.agents
    context = lesson_context(goal, space)
    lessons = tuple(store.lessons_for(context)) if use_lessons else ()
    recalled = store.recall(context) if use_lessons and builtin else []
    if lessons or recalled:
        helpful = sum(lesson.outcome == "helps" for lesson in lessons)
        log(f"{len(lessons)} lesson(s) from earlier runs ({helpful} helpful moves), "
            f"{len(recalled)} champion setting(s) recalled; --no-lessons to ignore them")
    if builtin:
        agents += [RecallAgent(recalled)] if recalled else []  # first: start where others ended
        agents += [StartingPointsAgent()] if space.starting else []  # then the space's own
        agents += bandit_agents(space.knobs)  # they read the lessons in their context
    swarm = Run(goal, store, evaluator_for(goal, workdir, store), space, agents, workdir,
                log=log, fallback=RestartAgent() if builtin else None, observer=observer,
                reviewer=reviewer, executor=executor, lessons=lessons, started=started)
    return swarm.execute(resume), swarm
