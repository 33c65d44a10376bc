"""``swarmfab model TARGET``: where a model's time goes, its parts made faster, and the
faster model checked and timed against the original (:mod:`swarmfab.model`)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from swarmfab.cli._common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    command_started,
    console,
    errors,
    execute_goal,
    friendly,
)
from swarmfab.cli.run import WorkdirOption

__all__ = ["model"]


@friendly
def model(
    target: Annotated[str, typer.Argument(
        help="A Hugging Face model directory (config.json and weights) or "
             "module.py:factory (a function returning the module and its example inputs).")],
    budget: Annotated[str, typer.Option(
        help="Wall-time budget of the whole command, every stage included, e.g. 15m.")] = "15m",
    prefill: Annotated[int, typer.Option(min=1, help="Prefill length (tokens, batch 1).")] = 512,
    decode_batch: Annotated[int, typer.Option(min=1, help="Decode batch size.")] = 1,
    decode_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per decode.")
                             ] = 16,
    threads: Annotated[int | None, typer.Option(
        min=1, help="Threads (default: every core this process may use).")] = None,
    coverage: Annotated[float, typer.Option(
        min=0.05, max=1.0, help="Extract parts until they cover this share of the time.")
                        ] = 0.8,
    max_parts: Annotated[int, typer.Option(min=1, help="Extract at most this many parts.")
                         ] = 6,
    out: Annotated[Path, typer.Option(help="Where the problem files are written.")
                   ] = Path("swarmfab-model"),
    profile_only: Annotated[bool, typer.Option(
        "--profile-only", help="Profile and extract; optimise nothing.")] = False,
    precision: Annotated[str, typer.Option(
        help="float32, or bfloat16: parts may compute in bfloat16 (on a CPU with "
             "bfloat16 instructions), held to bfloat16's tolerances, and the model is "
             "judged on its logits alone, not its greedy tokens.")] = "float32",
    db: DbOption = DEFAULT_DB,
    workdir: WorkdirOption = Path(".swarmfab"),
    as_json: JsonOption = False,
) -> None:
    """Profile a model, make its slowest parts faster with the factory, and hand back the
    faster model: checked end to end against the original, timed side by side."""
    import os

    import torch

    from swarmfab.goal import parse_duration
    from swarmfab.knowledge import Store
    from swarmfab.model import Options, load_target, study

    started = command_started()
    _check_precision(precision)
    count = threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(count)
    options = Options(budget_s=parse_duration(budget), tokens=prefill, batch=decode_batch,
                      new_tokens=decode_tokens, threads=count, coverage=coverage,
                      max_parts=max_parts, profile_only=profile_only, precision=precision)
    shown = errors if as_json else console

    def log(line: str) -> None:
        shown.print(f"{time.monotonic() - started:6.1f}s {line}", highlight=False)

    factory = _Factory(Store(db), workdir, count, shown, log, out / "operators",
                       options.limits if precision != "float32" else None)
    loaded = load_target(target)
    log(f"target: {loaded.description}")
    result = study(loaded, options, out, factory, log, started)
    text = json.dumps(result.to_dict(), indent=2, default=str)
    (out / "study.json").write_text(text)
    _html(json.loads(text), out / "report.html", log)
    if as_json:
        print(text)
        return
    _print(result, out)


def _check_precision(precision: str) -> None:
    from swarmfab.model.study import PRECISIONS, precision_refusal

    if precision not in PRECISIONS:
        raise typer.BadParameter(f"{precision!r}: one of {', '.join(PRECISIONS)}",
                                 param_hint="--precision")
    refusal = precision_refusal(precision)
    if refusal:
        raise typer.BadParameter(refusal, param_hint="--precision")


def _html(study: dict[str, Any], out: Path, log: Callable[[str], None]) -> None:
    """The HTML report beside study.json, where the report extra is installed."""
    from swarmfab.errors import MissingExtraError

    try:
        from swarmfab.report.model_report import write_model_report
    except MissingExtraError as exc:
        log(f"no HTML report: {exc}")
        return
    log(f"report: {write_model_report(study, out)}")


class _Factory:
    """The factory as ``swarmfab model``'s stages use it: a run per part (its problem
    file, or its workload at the model's shapes), and a workload's champion exported as
    a package and patched into the model's library."""

    def __init__(self, store: Any, workdir: Path, threads: int, shown: Any,
                 log: Callable[[str], None], packages: Path, tolerances: Any = None):
        self.store, self.workdir, self.threads = store, workdir, threads
        self.shown, self.log, self.packages = shown, log, packages
        self.tolerances = tolerances  # a problem part's, where not its workload's default

    def optimise(self, part: Any, seconds: float) -> Any:
        from swarmfab.goal import default_goal
        from swarmfab.swarm.launch import sized_for_host

        budget = f"{seconds:.0f}s"
        if part.workload:
            goal = default_goal(part.workload).with_overrides(
                budget=budget, threads=self.threads, shapes=part.shapes)
        else:
            limits = {} if self.tolerances is None else {"tolerance": {
                "rms_ratio": self.tolerances.rms_ratio,
                "max_abs": self.tolerances.max_abs_ratio}}
            goal = sized_for_host(default_goal(part.problem).with_overrides(
                budget=budget, threads=self.threads, **limits), "auto", self.log)
        result, _ = execute_goal(goal, self.store, self.workdir, None,
                                 started=time.monotonic(), out=self.shown)
        return result

    def operator(self, part: Any, champion: Any) -> Any:
        import importlib

        from swarmfab.model.assemble import OperatorPatch
        from swarmfab.report.export import write_package

        name = f"{part.workload}_champion_{champion.id[:12]}"
        write_package(self.packages / name, SimpleNamespace(
            workload=part.workload, id=part.run_id), champion)
        if str(self.packages) not in sys.path:
            sys.path.insert(0, str(self.packages))
        return OperatorPatch.of(importlib.import_module(name))


def _print(result: Any, out: Path) -> None:
    from rich.table import Table

    if result.precision != "float32":
        console.print(f"reduced precision: parts could compute in {result.precision}, held "
                      f"to {result.precision}'s tolerances; the model is judged on its "
                      "logits alone, not its greedy tokens", highlight=False)

    for profile in result.profiles:
        table = Table(title=f"{profile.label}: {profile.seconds * 1e3:.1f} ms a run, parts "
                            f"cover {profile.covered:.0%}")
        for column in ("part", "instances", "calls", "share"):
            table.add_column(column, justify="left" if column == "part" else "right")
        for part in profile.parts:
            table.add_row(part.class_name, str(len(part.paths)), str(part.calls),
                          f"{part.share:.1%}")
        console.print(table)
        operators = ", ".join(f"{op.name.removeprefix('aten::')} {op.share:.0%}"
                              for op in profile.operators[:6])
        console.print(f"  top operators (self time): {operators}", highlight=False)
    parts = Table(title=f"parts (problem files in {out})")
    for column in ("part", "share", "its speedup", "run", "outcome"):
        parts.add_column(column)
    for part in result.parts:
        chosen = f"the {part.workload} workload" if part.workload else "extracted"
        outcome = "patched into the model" if part.patched else (
            part.note or ("crowned" if part.champion else chosen))
        speedup = " / ".join(f"{value:.2f}x" for value in part.speedups)
        parts.add_row(part.class_name, f"{part.share:.1%}", speedup, part.run_id or "",
                      outcome)
    console.print(parts)
    if result.end_to_end is not None:
        check = result.end_to_end
        console.print(f"end to end: {'passed' if check.passed else 'FAILED'}: {check.detail}",
                      highlight=False)
    if result.timings:
        timings = Table(title="the model, original and patched, side by side")
        for column in ("phase", "original", "patched", "speedup [95% CI]",
                       "Amdahl from the parts"):
            timings.add_column(column, justify="left" if column == "phase" else "right")
        for timing in result.timings:
            predicted = result.predicted.get(timing.phase)
            timings.add_row(timing.label, f"{timing.original.median * 1e3:.1f} ms",
                            f"{timing.patched.median * 1e3:.1f} ms",
                            f"{timing.speedup.median:.2f}x [{timing.speedup.low:.2f}, "
                            f"{timing.speedup.high:.2f}]",
                            f"{predicted:.2f}x" if predicted else "")
        console.print(timings)
        for profile in result.after:
            shares = ", ".join(f"{part.class_name} {part.share:.0%}"
                               for part in profile.parts[:5])
            console.print(f"the patched model, {profile.label}: {profile.seconds * 1e3:.1f} "
                          f"ms a run; {shares}", highlight=False)
        console.print(f"the crowned parts ran {result.champion_calls} times while timed"
                      + (f"; {result.fallback_calls} calls of another form than the one "
                         "extracted (a decode step with a cache) ran the original"
                         if result.fallback_calls else ""), highlight=False)
    for note in result.notes:
        console.print(note, highlight=False)
    stages = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.stages.items())
    console.print(f"stages: {stages}", highlight=False)
