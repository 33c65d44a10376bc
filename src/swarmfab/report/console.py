"""Terminal tables for verdicts, side-by-side benchmarks and run summaries (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from swarmfab.records import Estimate, Verdict

if TYPE_CHECKING:  # the evaluation imports torch; a report of stored runs needs none
    from swarmfab.evaluation import SideBySide

__all__ = ["against_itself_table", "bench_table", "run_table", "verdict_table"]


def _ms(estimate: Estimate) -> str:
    return f"{estimate.median * 1e3:.2f} ms [{estimate.low * 1e3:.2f}, {estimate.high * 1e3:.2f}]"


def _x(estimate: Estimate) -> str:
    return f"{estimate.median:.2f}x [{estimate.low:.2f}, {estimate.high:.2f}]"


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.0%}"


def verdict_table(verdict: Verdict) -> Table:
    """Every check of a verdict, failures first."""
    table = Table(title=f"verdict: {verdict.status.value} — {verdict.reason}", title_justify="left")
    table.add_column("case")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in sorted(verdict.checks, key=lambda c: c.passed):
        mark = "[green]pass[/]" if check.passed else "[red]FAIL[/]"
        table.add_row(check.case, check.check, mark, check.detail)
    return table


def bench_table(tables: list[SideBySide], title: str) -> Table:
    """Median time with 95% CI per implementation, and how much faster the first one is."""
    table = Table(title=title, title_justify="left")
    first = tables[0].reference if tables else "first"
    table.add_column("shape")
    table.add_column("implementation")
    table.add_column("median time [95% CI]", justify="right")
    table.add_column(f"{first} speedup over it [95% CI]", justify="right")
    table.add_column("roofline", justify="right")
    table.add_column("page faults a call", justify="right")
    for side in tables:
        for index, (name, seconds) in enumerate(side.seconds.items()):
            relative = side.ratio_to_reference[name]  # name's time / first's time
            shown = "-" if index == 0 else _x(relative)
            faults = side.faults.get(name)
            table.add_row(side.shape if index == 0 else "", name, _ms(seconds), shown,
                          _percent(side.roofline_fraction(name)),
                          "-" if faults is None else f"{faults:,.0f}")
        if side.memory_s is not None:  # the bound's memory term, timed in the same rounds
            table.add_row("", "[dim](bound) its bytes updated in place[/]",
                          f"[dim]{_ms(side.memory_s)}[/]", "-", "-", "-")
    return table


def against_itself_table(verdict: Verdict, title: str) -> Table:
    """A candidate timed against a copy of itself: each shape's ratio and how the gate
    reads it (anything but "indistinguishable" is the timing's error on this host)."""
    table = Table(title=title, title_justify="left")
    table.add_column("shape")
    table.add_column("candidate [95% CI]", justify="right")
    table.add_column("its copy [95% CI]", justify="right")
    table.add_column("candidate / copy [95% CI]", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("the gate reads")
    for timing in verdict.timings:
        reading = timing.comparison if timing.comparison == "indistinguishable" \
            else f"[red]{timing.comparison}[/]"
        table.add_row(timing.shape, _ms(timing.candidate_s), _ms(timing.incumbent_s),
                      f"{timing.ratio.median:.3f} [{timing.ratio.low:.3f}, "
                      f"{timing.ratio.high:.3f}]", str(timing.samples), reading)
    return table


def policy_table(rows: list[tuple[str, list[int | None], float]], best_s: float, target: float,
                 budget: int, measured: int, title: str) -> Table:
    """Evaluations each search policy needed to reach ``target`` of the best-known speed."""
    table = Table(title=f"{title}: evaluations to reach {target:.0%} of the best-known speed "
                        f"({best_s * 1e3:.3f} ms; {measured} distinct candidates measured)",
                  title_justify="left")
    table.add_column("policy")
    table.add_column("per seed", justify="right")
    table.add_column("median", justify="right")
    for policy, counts, median in rows:
        shown = ", ".join(str(c) if c is not None else f">{budget}" for c in counts)
        table.add_row(policy, shown, f"{median:g}" if median <= budget else f">{budget}")
    return table


def run_table(summary: dict[str, Any]) -> Table:
    """The closing table of a run: baselines vs champion with the speedup's CI."""
    dtype = summary.get("dtype", "float32")
    inputs = "" if dtype == "float32" else f", inputs in {dtype}"
    table = Table(title=f"champion vs PyTorch baselines (measured side by side{inputs})",
                  title_justify="left")
    table.add_column("shape")
    table.add_column("fastest baseline")
    table.add_column("baseline time", justify="right")
    table.add_column("champion time", justify="right")
    table.add_column("speedup [95% CI]", justify="right")
    table.add_column("roofline", justify="right")
    for shape in summary["shapes"]:
        fastest = shape["fastest_baseline"]
        base = Estimate(*shape["seconds"][fastest])
        champion = Estimate(*shape["seconds"]["champion"])
        speedup = Estimate(*shape["speedup"])
        table.add_row(shape["shape"], fastest, _ms(base), _ms(champion), _x(speedup),
                      _percent(shape.get("roofline_fraction")))
    return table

