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

from swarmfab.errors import GoalError, MissingExtraError, SwarmfabError  # noqa: E402

if TYPE_CHECKING:
    from swarmfab.knowledge import Store
    from swarmfab.workloads import Shape

__all__ = ["DB_ENV", "DEFAULT_DB", "ENGINE_MODULES", "RUN_HELP", "STARTED",
           "AllowWeakSandboxOption", "DbOption", "JsonOption", "LlmApiKeyEnvOption",
           "LlmBaseUrlOption", "LlmBudgetTokensOption", "LlmBudgetUsdOption", "LlmModelOption",
           "LlmPriceInputOption", "LlmPriceOutputOption", "LlmProviderOption",
           "RequiredRunArgument", "RunArgument", "command_started", "console", "errors",
           "execute_goal", "friendly", "parse_shape", "print_json", "require_extra", "say"]

# the store's default path (swarmfab.knowledge.DEFAULT_DB, which imports SQLAlchemy)
DEFAULT_DB = str(Path(".swarmfab") / "swarmfab.db")
_WIDTH = None if sys.stdout.isatty() else 140  # pipes and CI get full-width tables
console = Console(soft_wrap=True, width=_WIDTH)
errors = Console(stderr=True, soft_wrap=True, width=_WIDTH)
F = TypeVar("F", bound=Callable[..., Any])

# SWARMFAB_DB names the store once (a PostgreSQL URL with its password stays off command
# lines); --db given on the command line wins over it
DB_ENV = "SWARMFAB_DB"
DbOption = Annotated[str, typer.Option(
    "--db", envvar=DB_ENV, help="SQLite path or SQLAlchemy URL of the store.")]
JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print the result as JSON on stdout (progress, if any, on stderr).")]
# a run is named the same way by every command: a positional RUN, an id or `latest`
# (`bench --run RUN` is the one option: bench's positional is the workload)
RUN_HELP = "A run id (see `swarmfab runs`) or latest"
RunArgument = Annotated[str | None, typer.Argument(
    metavar="RUN", help=f"{RUN_HELP} (the default).", show_default=False)]
RequiredRunArgument = Annotated[str, typer.Argument(metavar="RUN", help=f"{RUN_HELP}.")]
AllowWeakSandboxOption = Annotated[bool, typer.Option(
    "--allow-weak-sandbox",
    help="Run untrusted candidates (an LLM's, a file's) even where the sandbox holds only in "
         "part here (see `swarmfab doctor`); each verdict records what held.")]
# where LLM agents get their model (run, suite): each overrides the goal's [llm] table
LlmProviderOption = Annotated[str | None, typer.Option(
    help="openai (any compatible server) or anthropic.")]
LlmBaseUrlOption = Annotated[str | None, typer.Option(
    help="Endpoint, e.g. http://127.0.0.1:8000/v1 for vLLM (default: the provider's).")]
LlmModelOption = Annotated[str | None, typer.Option(help="Model name the endpoint serves.")]
LlmApiKeyEnvOption = Annotated[str | None, typer.Option(
    help="Environment variable holding the API key (default OPENAI_API_KEY or "
         "ANTHROPIC_API_KEY).")]
LlmBudgetUsdOption = Annotated[float | None, typer.Option(
    help="Spend after which the LLM agents stop (the run goes on); default $1 for a model "
         "whose price is known. A model not in the price table needs --llm-price-input "
         "and --llm-price-output for it.")]
LlmBudgetTokensOption = Annotated[int | None, typer.Option(
    help="Input and output tokens after which the LLM agents stop (any model).")]
LlmPriceInputOption = Annotated[float | None, typer.Option(
    help="The model's price in USD per million input tokens (for a model not in the "
         "price table).")]
LlmPriceOutputOption = Annotated[float | None, typer.Option(
    help="The model's price in USD per million output tokens.")]

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


# what an engine goal and `swarmfab serve` import (the engine extra)
ENGINE_MODULES = ("httpx", "fastapi", "uvicorn", "prometheus_client", "safetensors",
                  "tokenizers", "jinja2")


def require_extra(extra: str, needed_for: str, modules: tuple[str, ...]) -> None:
    """A MissingExtraError naming ``extra`` (pyproject.toml's optional dependencies) where
    one of ``modules`` is not installed: said before a command starts any work. Nothing is
    imported."""
    from importlib.util import find_spec

    for module in modules:
        if find_spec(module) is None:
            raise MissingExtraError(module, extra, needed_for)


def parse_shape(text: str) -> Shape:
    """A ``--shape`` option (:func:`swarmfab.goal.parse_shape`; imported when used, so
    ``--help`` stays light)."""
    from swarmfab.goal import parse_shape as parse

    return parse(text)


def print_json(data: Any) -> None:
    """A command's result as JSON on stdout, alone (``--json``)."""
    import json

    typer.echo(json.dumps(data, indent=2, default=str))


def say(line: str) -> None:
    """A progress line on the console, as written (no markup, no highlighting)."""
    console.print(line, highlight=False, markup=False)


def execute_goal(goal: Any, store: Store, workdir: Path, resume: str | None,
                 executor: Any = None, use_lessons: bool = True, started: float | None = None,
                 out: Any = console) -> tuple[Any, Any]:
    """:func:`swarmfab.swarm.launch.execute_goal` with its progress on ``out``: a live
    panel on a terminal, plain lines on a pipe; the budget counts from ``started``, by
    default the command's first instant."""
    from swarmfab.report.progress import LiveProgress
    from swarmfab.swarm.launch import execute_goal as launch

    options = {"executor": executor, "use_lessons": use_lessons,
               "started": command_started() if started is None else started}
    if out.is_terminal:
        with LiveProgress(out) as live:
            return launch(goal, store, workdir, resume, log=live.log, observer=live.update,
                          **options)
    return launch(goal, store, workdir, resume,
                  log=lambda line: out.print(line, highlight=False), **options)
