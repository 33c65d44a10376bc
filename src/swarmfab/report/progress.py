"""Live progress of a run in the terminal (rich), or plain lines when not a terminal."""

from __future__ import annotations

from collections import deque
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from swarmfab.swarm.status import RunStatus

__all__ = ["LiveProgress", "render_status"]

_RECENT_LINES = 8


def render_status(status: RunStatus) -> Table:
    """The run at a glance: phase, budget, throughput, outcomes, champion per shape."""
    table = Table(title=f"run {status.run_id}: {status.phase}", title_justify="left",
                  show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    left = max(0.0, status.budget_s - status.elapsed_s)
    table.add_row("time", f"{status.elapsed_s:.0f} s of {status.budget_s:.0f} s "
                          f"({left:.0f} s left)")
    table.add_row("evaluations", f"{status.evaluations} ({status.per_minute:.1f} per minute)")
    outcomes = ", ".join(f"{n} {s}" for s, n in sorted(status.counts.items())) or "-"
    table.add_row("verdicts", outcomes)
    if status.top_reasons:
        table.add_row("top rejects", "; ".join(f"{r} ({n})" for r, n in status.top_reasons))
    table.add_row("champion", status.champion or "none yet")
    for shape, median, low, high, roofline in status.champion_shapes:
        fraction = "" if roofline is None else f", {roofline:.0%} of roofline"
        table.add_row(f"  {shape}",
                      f"{median:.2f}x [{low:.2f}, {high:.2f}] vs the baselines{fraction}")
    for agent, doing in sorted(status.activity.items()):
        table.add_row(f"  {agent}", doing)
    return table


class LiveProgress:
    """A live panel: the status table above the most recent log lines."""

    def __init__(self, console: Console):
        self._lines: deque[str] = deque(maxlen=_RECENT_LINES)
        self._status: RunStatus | None = None
        self._live = Live(console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._live.__exit__(kind, error, trace)

    def log(self, line: str) -> None:
        self._lines.append(line)
        self._refresh()

    def update(self, status: RunStatus) -> None:
        self._status = status
        self._refresh()

    def _refresh(self) -> None:
        parts: list[RenderableType] = []
        if self._status is not None:
            parts.append(render_status(self._status))
        parts.append(Panel("\n".join(self._lines) or "-", title="recent", title_align="left"))
        self._live.update(Group(*parts))
