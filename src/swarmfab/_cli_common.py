"""What every ``swarmfab`` command shares: consoles, options, errors, shape syntax."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from swarmfab.errors import GoalError, SwarmfabError
from swarmfab.workloads import Shape

__all__ = ["DbOption", "JsonOption", "console", "errors", "friendly", "parse_shape"]

_WIDTH = None if sys.stdout.isatty() else 140  # pipes and CI get full-width tables
console = Console(soft_wrap=True, width=_WIDTH)
errors = Console(stderr=True, soft_wrap=True, width=_WIDTH)
F = TypeVar("F", bound=Callable[..., Any])

DbOption = Annotated[str, typer.Option("--db", help="SQLite path or SQLAlchemy URL of the store.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def friendly(command: F) -> F:
    """Turn swarmfab's own errors into one clear line (exit 2 for usage, 1 otherwise)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GoalError as exc:
            errors.print(f"[red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
        except SwarmfabError as exc:
            errors.print(f"[red]error:[/] {exc}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def parse_shape(text: str) -> Shape:
    from swarmfab.goal import ShapeSpec

    sizes, with_state = text.removesuffix("+h0"), text.endswith("+h0")
    try:
        numbers = [int(part) for part in sizes.split(",")]
        b, t, h, k, v, *rest = numbers
        return ShapeSpec(B=b, T=t, H=h, K=k, V=v, HV=rest[0] if rest else None,
                         initial_state=with_state).to_shape()
    except (ValueError, TypeError) as exc:
        raise GoalError(f"--shape {text!r}: expected B,T,H,K,V[,HV][+h0] as positive integers "
                        "(+h0: start from an initial state)") from exc
