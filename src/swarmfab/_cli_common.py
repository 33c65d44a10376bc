"""What every ``swarmfab`` command shares: consoles, options, errors, shape syntax.

Only typer and rich are imported here at module level: ``swarmfab --help`` must answer
without loading torch, pydantic or the store, so everything heavier is imported inside
the function that needs it.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # first thing at import: when a `swarmfab` process began its command

import functools  # noqa: E402 - after STARTED, so it counts the imports below
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Annotated, Any, TypeVar  # noqa: E402

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402

from swarmfab.errors import GoalError, SwarmfabError  # noqa: E402

if TYPE_CHECKING:
    from swarmfab.knowledge import Store
    from swarmfab.workloads import Shape

__all__ = ["DEFAULT_DB", "STARTED", "DbOption", "JsonOption", "LlmApiKeyEnvOption",
           "LlmBaseUrlOption", "LlmModelOption", "LlmProviderOption", "command_started",
           "console", "errors", "evaluator_for", "friendly", "parse_shape", "require_device"]

# the store's default path (swarmfab.knowledge.DEFAULT_DB, which imports SQLAlchemy)
DEFAULT_DB = str(Path(".swarmfab") / "swarmfab.db")
_WIDTH = None if sys.stdout.isatty() else 140  # pipes and CI get full-width tables
console = Console(soft_wrap=True, width=_WIDTH)
errors = Console(stderr=True, soft_wrap=True, width=_WIDTH)
F = TypeVar("F", bound=Callable[..., Any])

DbOption = Annotated[str, typer.Option("--db", help="SQLite path or SQLAlchemy URL of the store.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
# where LLM agents get their model (run, suite): each overrides the goal's [llm] table
LlmProviderOption = Annotated[str | None, typer.Option(
    help="openai (any compatible server) or anthropic.")]
LlmBaseUrlOption = Annotated[str | None, typer.Option(
    help="Endpoint, e.g. http://127.0.0.1:8000/v1 for vLLM (default: the provider's).")]
LlmModelOption = Annotated[str | None, typer.Option(help="Model name the endpoint serves.")]
LlmApiKeyEnvOption = Annotated[str | None, typer.Option(
    help="Environment variable holding the API key (default OPENAI_API_KEY or "
         "ANTHROPIC_API_KEY).")]

# A command that starts within this long of the import is the process's own command: its
# start-up (interpreter, imports) counts. One started later in a process that imported
# the CLI long before (CliRunner in tests, a notebook) counts from its own start.
_STARTUP_S = 2.0
_command_began = STARTED


def command_started() -> float:
    """The ``time.monotonic()`` at which the running command began (budgets count from it)."""
    return _command_began


def friendly(command: F) -> F:
    """Turn swarmfab's own errors into one clear line (exit 2 for usage, 1 otherwise)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _command_began
        now = time.monotonic()
        _command_began = STARTED if now - STARTED < _STARTUP_S else now
        try:
            return command(*args, **kwargs)
        except GoalError as exc:
            errors.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from None
        except SwarmfabError as exc:  # messages quote [tables] and extras: never markup
            errors.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def parse_shape(text: str) -> Shape:
    from swarmfab.goal import ShapeSpec

    sizes, _, suffix = text.partition("+")
    try:
        numbers = [int(part) for part in sizes.split(",")]
        b, t, h, k, v, *rest = numbers
        if suffix not in ("", "h0") and not suffix.startswith("pool"):
            raise ValueError(suffix)
        pool = int(suffix.removeprefix("pool")) if suffix.startswith("pool") else None
        return ShapeSpec(B=b, T=t, H=h, K=k, V=v, HV=rest[0] if rest else None,
                         initial_state=suffix == "h0", pool=pool).to_shape()
    except (ValueError, TypeError) as exc:
        raise GoalError(f"--shape {text!r}: expected B,T,H,K,V[,HV][+h0|+poolN] as positive "
                        "integers (+h0: start from an initial state; +poolN: update states "
                        "in place in a pool of N, as an engine decodes)") from exc


def require_device(device: str) -> None:
    """A goal for a CUDA device stops here, with the reason, on a host without one."""
    from swarmfab.backends import cuda_device_available

    if device == "cuda" and not cuda_device_available():
        raise GoalError("the goal asks for device = \"cuda\" but this host has no CUDA "
                        "device (torch.cuda.is_available() is False); run it on a GPU host "
                        "or set device = \"cpu\"")


def evaluator_for(goal: Any, workdir: Path, store: Store, shapes: list[Any] | None = None) -> Any:
    """An evaluator for ``goal`` whose corpus is the built-in cases plus the stored ones."""
    from swarmfab.evaluation import Evaluator
    from swarmfab.sandbox import Limits
    from swarmfab.workloads import DTYPES, Tolerances, get_workload

    workload = get_workload(goal.workload)
    corpus = [*workload.validation_cases(), *store.cases(goal.workload)]
    defaults = workload.tolerances(DTYPES[goal.dtype])
    tolerances = Tolerances(goal.tolerance.rms_ratio or defaults.rms_ratio,
                            goal.tolerance.max_abs or defaults.max_abs_ratio)
    return Evaluator(workload, shapes or goal.target_shapes(), workdir / "cache",
                     threads=goal.threads, tolerances=tolerances,
                     limits=Limits(wall_s=goal.eval_timeout_s), seed=goal.seed, cases=corpus,
                     device=goal.device, dtype=goal.dtype)
