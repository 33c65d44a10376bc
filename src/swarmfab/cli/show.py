"""``show``, ``report``, ``runs`` and ``export``: stored runs, at a glance, verdict by verdict,
or as the champion's package."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmfab.cli._common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    RunArgument,
    console,
    friendly,
    print_json,
    require_extra,
)

__all__ = ["export", "report", "runs", "show"]


@friendly
def report(
    run_id: RunArgument = None,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
    out: Annotated[Path | None, typer.Option(
        metavar="FILE",
        help="Write one self-contained HTML file (charts, lineage, evidence) here (the "
             "report extra).")] = None,
) -> None:
    """Summarise a run from the store: verdicts by status, champion lineage, final figures
    (--out FILE: the HTML report instead; with --json, where it was written)."""
    from swarmfab.knowledge import Store
    from swarmfab.report import run_table
    from swarmfab.report.adequacy import adequacy_line, measurement_key
    from swarmfab.report.isolation import isolation_summary

    store = Store(db)
    if out is not None:
        require_extra("report", "the HTML report (report --out)", ("matplotlib", "jinja2"))
        from swarmfab.report.html import write_report

        written = write_report(store, run_id, out)
        if as_json:
            print_json({"run": store.run(run_id).id, "out": str(written)})
            return
        console.print(f"report written to {written}", highlight=False)
        return
    record = store.run(run_id)
    judged = store.verdicts(record.id)
    verdicts: list[dict[str, Any]] = [
        {"candidate": row.candidate_id, "agent": row.agent, "status": row.status,
         "reason": row.reason, "champion": row.became_champion,
         "isolation": verdict.isolation.level or None}
        for row, verdict in judged
    ]
    counts = store.status_counts(record.id)
    isolation = isolation_summary(verdict for _, verdict in judged)
    adequacy = store.measurement(measurement_key(record.workload))  # corpus adequacy's
    if as_json:
        data = {
            "run": record.id, "workload": record.workload, "status": record.status,
            "started_at": str(record.started_at), "finished_at": str(record.finished_at),
            "counts": counts, "champion": record.champion_id, "summary": record.summary,
            "isolation": isolation, "verdicts": verdicts,
            "adequacy": adequacy and {"started": adequacy["started"],
                                      "scores": adequacy["scores"]["scoring"]},
        }
        print(json.dumps(data, indent=2, default=str))
        return
    console.print(f"run {record.id} ({record.workload}): {record.status}; verdicts {counts}")
    console.print(f"isolation: {isolation['describe']}", highlight=False, markup=False)
    if adequacy:
        console.print(adequacy_line(adequacy), highlight=False, markup=False)
    for entry in verdicts:
        crown = " (champion)" if entry["champion"] else ""
        console.print(f"  {entry['candidate'][:10]} {entry['agent']:<20} {entry['status']:<12} "
                      f"{entry['reason'][:90]}{crown}", highlight=False)
    if record.summary and record.summary.get("shapes"):
        console.print(run_table(record.summary))


@friendly
def show(
    run_id: RunArgument = None,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
) -> None:
    """A run at a glance: goal, champion and its figures, verdicts by status, agent, reason."""
    from collections import Counter

    from swarmfab.knowledge import Store
    from swarmfab.report.isolation import isolation_summary
    from swarmfab.report.llm import summarise_events

    store = Store(db)
    record = store.run(run_id)
    judged = store.verdicts(record.id)
    rows = [row for row, _ in judged]
    rejected = [row for row in rows if row.status != "accepted"]
    data = {
        "run": record.id, "workload": record.workload, "status": record.status,
        "goal": record.goal, "host": record.host, "champion": record.champion_id,
        "champion_figures": (record.summary or {}).get("shapes", []),
        "archive": (record.summary or {}).get("archive", []),
        "search": (record.summary or {}).get("search"),  # seconds, evaluations, workers
        "overhead": (record.summary or {}).get("overhead"),
        "verdicts": len(rows),
        "by_status": dict(Counter(row.status for row in rows)),
        "by_agent": dict(Counter(row.agent for row in rows)),
        "by_reject_reason": dict(Counter(row.reason.split(":")[0] for row in rejected)),
        "isolation": isolation_summary(verdict for _, verdict in judged),
        "interventions": [detail for _, detail in store.events(record.id, "intervention")],
        "events": [{"kind": kind, "detail": detail} for kind, detail in store.events(record.id)],
        "llm": summarise_events(store.events(record.id)),
        **_generation(store, record.id),
    }
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    knobs = store.candidate(record.champion_id).knobs if record.champion_id else None
    lines = [("run", record.id), ("workload", record.workload), ("status", record.status),
             ("goal", describe_goal(record.goal or {})),
             ("champion", _champion_line(record.champion_id, knobs,
                                         bool(data["champion_figures"]),
                                         record.workload == "engine")),
             *[("", line) for line in figure_lines(data["champion_figures"])]]
    if record.workload == "engine" and record.summary:
        lines += [("gain", _engine_gain(record.summary))]
    if record.champion_id or data["generation"]["predecessor"]:
        lines += [("generation", data["generation"]["describe"])]
    if len(data["generations"]) > 1:
        lines += [("generations", " -> ".join(
            f"{run} (this run)" if run == record.id else run for run in data["generations"]))]
    lines += [(key, data[key]) for key in ("verdicts", "by_status", "by_agent",
                                           "by_reject_reason", "interventions", "llm")
              if data[key] is not None]
    lines += [("isolation", data["isolation"]["describe"])]
    for key, value in lines:
        console.print(f"{key:>17}{':' if key else ' '} {value}", highlight=False, markup=False)


def _generation(store: Any, run_id: str) -> dict[str, Any]:
    """Where the run's champion stands after refreshes, and its line across generations."""
    import dataclasses

    from swarmfab.knowledge.generations import Generations

    generations = Generations(store)
    generation = generations.of(run_id)
    described = generation.describe()
    if generation.predecessor:
        described += f"; succeeded the stale champion of run {generation.predecessor}"
    return {"generation": {**dataclasses.asdict(generation), "describe": described},
            "generations": generations.lineage(run_id)}


def describe_goal(goal: dict[str, Any]) -> str:
    """A stored goal in one line: workload, device, shapes, budget, threads, workers..."""
    def get(*names: str) -> Any:
        return next((goal[name] for name in names if goal.get(name) is not None), None)

    if goal.get("kind") == "engine":
        limits = ", ".join(f"{k} {v:g}" for k, v in (goal.get("objective") or {}).items()
                           if v is not None)
        traffic = ", ".join(f"{k} {v}" for k, v in (goal.get("traffic") or {}).items())
        return (f"engine for {get('model')}: {get('metric')} under {limits or '-'}; "
                f"traffic {traffic}; budget {_seconds(get('budget_s', 'budget'))}, "
                f"threads {get('threads')}, seed {get('seed')}")
    shapes = get("shapes")
    listed = ("; ".join(_shape_label(s) for s in shapes) if shapes
              else "the workload's default shapes")
    parts = [f"{get('workload')} on {get('device') or 'cpu'}",
             f"{len(shapes) if shapes else 'default'} shape(s) ({listed})",
             f"budget {_seconds(get('budget_s', 'budget'))}",
             f"threads {get('threads')}", f"workers {get('workers') or 'auto'}",
             f"seed {get('seed')}",
             f"max evaluations {get('max_evaluations') or 'none'}",
             f"agents {', '.join(get('agents') or ['builtin'])}",
             f"baselines {', '.join(get('baselines') or ['default'])}"]
    timeout = get("eval_timeout_s", "eval_timeout")
    if timeout is not None:
        parts.append(f"evaluation timeout {_seconds(timeout)}")
    return ", ".join(parts)


def figure_lines(figures: list[dict[str, Any]]) -> list[str]:
    """Per shape: the champion's speedup over the fastest baseline with its 95% CI,
    roofline fraction and both times (median [95% CI]), as the run's final table has them."""
    lines = []
    for figure in figures:
        fastest = figure.get("fastest_baseline", "?")
        seconds = figure.get("seconds", {})
        roofline = figure.get("roofline_fraction")
        speedup = _interval(figure.get("speedup"), 1.0, "x", ".2f")
        lines.append(
            f"{figure.get('shape', '?')}: {speedup} over {fastest} "
            f"({_interval(seconds.get(fastest), 1e3, ' ms', '.3f')} -> "
            f"champion {_interval(seconds.get('champion'), 1e3, ' ms', '.3f')}), "
            f"roofline {'-' if roofline is None else f'{roofline:.0%}'}")
    return lines


def _champion_line(champion_id: str | None, knobs: dict[str, Any] | None,
                   figures: bool, engine: bool = False) -> str:
    if champion_id is None:
        return "none (no candidate beat the baselines; they are the answer)"
    setting = ", ".join(f"{name}={value}" for name, value in (knobs or {}).items())
    where = ("" if engine else "; per shape, against the fastest baseline:" if figures
             else "; no final figures recorded")
    return f"{champion_id} ({setting or 'hand-written'}){where}"


def _engine_gain(summary: dict[str, Any]) -> str:
    """An engine run's closing figure: the champion's metric over the default's."""
    metric = summary.get("metric", "metric")
    if not summary.get("gain"):
        if summary.get("champion") is not None and \
                summary.get("champion") == summary.get("default"):
            return "none: the default settings stayed champion"
        return "not measured (the run ended before its closing comparison)"
    return (f"{metric} {_interval(summary['gain'], 1.0, 'x', '.2f')} over the default "
            f"settings ({summary.get('default_metric', 0):.3g} -> "
            f"{summary.get('champion_metric', 0):.3g}), side by side")


def _interval(values: Any, scale: float, unit: str, spec: str) -> str:
    if not values or len(values) != 3:
        return "-"
    median, low, high = (scale * float(v) for v in values)
    return f"{median:{spec}}{unit} [{low:{spec}}, {high:{spec}}]"


def _shape_label(shape: dict[str, Any]) -> str:
    """As :attr:`swarmfab.workloads.Shape.label` has it (HV defaults to H)."""
    h, hv = shape.get("H"), shape.get("HV") or shape.get("H")
    heads = f"H{h}" if hv == h else f"H{h}/HV{hv}"
    pool = shape.get("pool")
    state = f" +pool{pool}" if pool else " +h0" if shape.get("initial_state") else ""
    return f"B{shape.get('B')} T{shape.get('T')} {heads} K{shape.get('K')} V{shape.get('V')}{state}"


def _seconds(value: Any) -> str:
    if not isinstance(value, int | float):
        return str(value)
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


@friendly
def export(
    run_id: RunArgument = None,
    out: Annotated[Path, typer.Option(metavar="DIR", help="Directory to write.")] = Path(
        "champion"),
    name: Annotated[str | None, typer.Option(
        help="Python package name (default: WORKLOAD_champion).")] = None,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
) -> None:
    """Write a run's champion as an installable package with provenance and evidence (an
    engine run's: its serving recipe)."""
    from swarmfab.knowledge import Store
    from swarmfab.report.export import export_champion

    store = Store(db)
    where = export_champion(store, run_id, out, name)
    recipe = (where / "recipe.json").is_file()  # an engine run's recipe
    if as_json:
        print_json({"run": store.run(run_id).id, "out": str(where),
                    "kind": "recipe" if recipe else "package",
                    "wheels": sorted(str(p) for p in (where / "dist").glob("*.whl"))})
        return
    if recipe:
        console.print(f"engine recipe exported to {where}: `swarmfab serve MODEL --recipe "
                      f"{where}`; evidence in EVIDENCE.md and provenance.json",
                      highlight=False)
        return
    console.print(f"champion exported to {where}: `pip install {where}`, then import it; "
                  "evidence in VERIFICATION.md and provenance.json")


@friendly
def runs(db: DbOption = DEFAULT_DB, as_json: JsonOption = False) -> None:
    """List the runs in the store; a champion found stale by `refresh` is marked."""
    from swarmfab.knowledge import Store
    from swarmfab.knowledge.generations import Generations

    store = Store(db)
    generations = Generations(store)
    if as_json:
        listed = []
        for record in store.runs():
            generation = generations.of(record.id)
            listed.append({"run": record.id, "workload": record.workload,
                           "status": record.status, "champion": record.champion_id,
                           "started_at": str(record.started_at),
                           "finished_at": str(record.finished_at),
                           "generation": generation.state, "successor": generation.successor})
        print_json(listed)
        return
    for record in store.runs():
        generation = generations.of(record.id)
        mark = "" if generation.state == "unchecked" else f" {generation.state}"
        mark += f" -> {generation.successor}" if generation.successor else ""
        console.print(f"{record.id}  {record.workload:<8} {record.status:<12} "
                      f"champion={record.champion_id}{mark}", highlight=False)
