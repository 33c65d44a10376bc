"""The charts of a run, drawn server-side as inline SVG (matplotlib's SVG backend).

Shared by the HTML report and the dashboard: each function takes a :class:`RunView` and
returns a :class:`Chart` whose SVG needs no network, no script and no font download
(text stays text, so a reader can search and copy it).
"""

from __future__ import annotations

import io
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from swarmfab.errors import MissingExtraError

try:  # the report extra
    import matplotlib
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
except ImportError as exc:
    raise MissingExtraError("matplotlib", "report", "drawing a run's charts") from exc

from swarmfab.records import Estimate
from swarmfab.report.run_view import RunView

__all__ = ["Chart", "all_charts", "champion_shapes", "offered_chart", "pareto_chart"]

_STYLE: dict[str, Any] = {"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 11,
          "axes.spines.top": False, "axes.spines.right": False, "svg.hashsalt": "swarmfab"}
_CHAMPION, _MUTED = "#c2410c", "#94a3b8"


@dataclass(frozen=True, slots=True)
class Chart:
    key: str  # stable id for pages and tests
    title: str
    svg: str
    note: str = ""  # what the chart shows and how it was measured


_DRAWING = threading.Lock()  # matplotlib's style settings are process-wide


def all_charts(view: RunView) -> list[Chart]:
    """Every chart of the report, in reading order."""
    with _DRAWING, matplotlib.rc_context(cast(Any, _STYLE)):
        if view.serving is not None:  # an engine run: no shapes, roofline or corpus
            charts = [progress_chart(view), pareto_chart(view), rejection_chart(view)]
            return [*charts, offered_chart(view)] if view.serving.offered else charts
        return [progress_chart(view), shape_chart(view), roofline_chart(view),
                rejection_chart(view), corpus_chart(view)]


def champion_shapes(view: RunView) -> tuple[list[tuple[str, Estimate]], str]:
    """The champion's speedup over the fastest baseline per shape, and where it comes from:
    the closing side-by-side measurement, or (before it exists) the product of each
    crowning's gain during the search."""
    final = view.summary.get("shapes") or []
    if final:
        return ([(s["shape"], Estimate(*s["speedup"])) for s in final],
                "closing side-by-side measurement")
    compounded: dict[str, Estimate] = {}
    for step in view.lineage:
        for shape, gain in step.gains:
            before = compounded.get(shape, Estimate(1.0, 1.0, 1.0))
            compounded[shape] = Estimate(before.median * gain.median, before.low * gain.low,
                                         before.high * gain.high)
    return list(compounded.items()), "compounded from each crowning during the search"


def progress_chart(view: RunView) -> Chart:
    title = "Best speed over time"
    figure, axes = _figure(title)
    agents: dict[str, list[tuple[float, float]]] = {}
    for e in view.evaluations:
        if e.speed is not None:
            best = max(e.speed, agents[e.agent][-1][1]) if e.agent in agents else e.speed
            agents.setdefault(e.agent, []).append((e.minutes, best))
    end = max(view.elapsed_minutes, max((e.minutes for e in view.evaluations), default=0.0))
    for agent, points in sorted(agents.items()):
        xs, ys = zip(*[*points, (end, points[-1][1])], strict=True)
        axes.step(xs, ys, where="post", linewidth=1, alpha=0.8, label=agent)
    crowned = [(e.minutes, e.speed) for e in view.evaluations
               if e.became_champion and e.speed is not None]
    if crowned:
        xs, ys = zip(*[(0.0, 1.0), *crowned, (end, crowned[-1][1])], strict=True)
        axes.step(xs, ys, where="post", color=_CHAMPION, linewidth=2.5, label="champion")
    engine = view.serving is not None
    reference = "the default settings" if engine else "the fastest baseline"
    axes.axhline(1.0, color=_MUTED, linestyle="--", linewidth=1, label=reference)
    axes.set_xlabel("minutes since the run started")
    axes.set_ylabel(f"{'gain' if engine else 'speed'} over {reference} (x)")
    if not agents:
        _empty(axes, "no verified candidate yet")
    axes.legend(fontsize=7, loc="best")
    what = ("Each accepted recipe's goal metric over the default settings', compounded from "
            "its paired load rounds against the incumbent" if engine else
            "Each accepted candidate's speed over the fastest PyTorch baseline (geometric "
            "mean over target shapes), compounded from its timing against the incumbent")
    return Chart("progress", title, _svg(figure),
                 f"{what}; lines are the best so far per agent and the champion overall.")


def offered_chart(view: RunView) -> Chart:
    """An engine run: the goal's metric of the default and the champion at each offered
    load."""
    serving = view.serving
    assert serving is not None
    title = f"{serving.metric.replace('_', ' ').capitalize()} against offered load"
    figure, axes = _figure(title)
    for candidate_id, points in serving.offered.items():
        default = not points[0][1].change  # the default differs from itself in nothing
        axes.plot([load for load, _ in points], [p.metric for _, p in points], marker="o",
                  color="#334155" if default else _CHAMPION, linewidth=1.5,
                  label=f"{'default settings' if default else 'champion'} "
                        f"{candidate_id[:10]}")
    axes.set_xlabel("offered load (requests/s)" if serving.open_loop
                    else "offered load (requests in flight)")
    axes.set_ylabel("goodput (requests/s)" if serving.metric == "goodput"
                    else "output tokens/s within the objective")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize=7, loc="best")
    return Chart("offered", title, _svg(figure),
                 "One load run of each engine at each offered load after the closing "
                 "comparison, alternating; goodput counts the requests that met the "
                 "objective.")


def pareto_chart(view: RunView) -> Chart:
    """An engine run: output throughput against p99 TPOT of every measured setting."""
    title = "Throughput against p99 TPOT: every measured setting"
    figure, axes = _figure(title, height=3.4)
    serving = view.serving
    assert serving is not None
    points = serving.points
    if points:
        axes.scatter([p.p99_tpot_ms for p in points], [p.output_throughput for p in points],
                     s=18, color=_MUTED, label="measured setting", zorder=3)
        front = serving.front
        axes.plot([p.p99_tpot_ms for p in front], [p.output_throughput for p in front],
                  color="#0f766e", marker="o", markersize=5, linewidth=1.5,
                  label="Pareto front", zorder=4)
        for p in points:
            if p.role == "default":
                axes.scatter([p.p99_tpot_ms], [p.output_throughput], marker="s", s=60,
                             color="#334155", label="default settings", zorder=5)
            if p.candidate_id == view.champion_id and p.role != "default":
                axes.scatter([p.p99_tpot_ms], [p.output_throughput], marker="*", s=160,
                             color=_CHAMPION, edgecolor="black", linewidth=0.5,
                             label="champion", zorder=6)
        limit = serving.objective.get("p99_tpot_ms")
        if limit is not None and limit <= 1.5 * max(p.p99_tpot_ms for p in points):
            axes.axvline(limit, color=_CHAMPION, linestyle=":", linewidth=1,
                         label=f"objective: p99 TPOT {limit:g} ms")
        elif limit is not None:  # far right of every setting: named, not drawn
            axes.scatter([], [], marker="", label=f"objective: p99 TPOT {limit:g} ms "
                                                  "(beyond every setting)")
        axes.legend(fontsize=7, loc="best")
    else:
        _empty(axes, "no load measurement recorded")
    axes.set_xlabel("p99 time per output token (ms)")
    axes.set_ylabel("output tokens/s")
    return Chart("pareto", title, _svg(figure),
                 "Medians over each setting's load rounds during the search, at the goal's "
                 "traffic; the front joins the settings that no other serves more tokens "
                 "at a lower p99 TPOT. Settings were measured at different moments of a "
                 "shared host: the champion's gain is the closing side-by-side figure.")


def shape_chart(view: RunView) -> Chart:
    title = "Champion speedup per shape (95% CI)"
    shapes, source = champion_shapes(view)
    figure, axes = _figure(title, height=max(2.2, 0.5 * len(shapes) + 1.4))
    if shapes:
        labels = [label for label, _ in shapes]
        medians = [s.median for _, s in shapes]
        errors = [[s.median - s.low for _, s in shapes], [s.high - s.median for _, s in shapes]]
        rows = list(range(len(shapes)))
        axes.barh(rows, medians, color=_CHAMPION, alpha=0.35)
        axes.errorbar(medians, rows, xerr=errors, fmt="o", color=_CHAMPION, capsize=4)
        for row, (_, s) in zip(rows, shapes, strict=True):
            axes.annotate(f" {s.median:.2f}x [{s.low:.2f}, {s.high:.2f}]", (s.high, row),
                          va="center", fontsize=8)
        axes.set_yticks(rows, labels)
        axes.axvline(1.0, color=_MUTED, linestyle="--", linewidth=1)
        axes.set_xlim(0, max(s.high for _, s in shapes) * 1.45)
    else:
        _empty(axes, "no champion")
    axes.set_xlabel("speedup over the fastest baseline (x)")
    return Chart("shapes", title, _svg(figure), f"Source: {source}.")


def roofline_chart(view: RunView) -> Chart:
    title = "Roofline: every accepted candidate"
    figure, axes = _figure(title, height=3.6)
    points = _roofline_points(view)
    if view.peaks is not None and view.shape_costs:
        intensities = [c.flops / c.nbytes for c in view.shape_costs.values()]
        low, high = min(intensities) / 4, max(intensities) * 4
        xs = [low * (high / low) ** (i / 64) for i in range(65)]
        ceiling = [min(view.peaks.flops_per_s, x * view.peaks.bytes_per_s) / 1e9 for x in xs]
        axes.plot(xs, ceiling, color="#334155", linewidth=1.5,
                  label=f"host bound ({view.peaks.flops_per_s / 1e9:.0f} GFLOP/s, "
                        f"{view.peaks.bytes_per_s / 1e9:.0f} GB/s)")
    for label, (others, champion) in points.items():
        if others:
            intensity, achieved = zip(*others, strict=True)
            axes.scatter(intensity, achieved, s=14, alpha=0.6, label=label)
        if champion is not None:
            axes.scatter([champion[0]], [champion[1]], marker="*", s=140, color=_CHAMPION,
                         edgecolor="black", linewidth=0.5, zorder=5)
    if any(champion for _, champion in points.values()):
        axes.scatter([], [], marker="*", s=100, color=_CHAMPION, label="champion")
    if points:
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.legend(fontsize=7, loc="lower right")
    else:
        _empty(axes, "no accepted candidate with a known cost model")
    axes.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    axes.set_ylabel("achieved GFLOP/s")
    note = ("host peaks measured by the run (float32 multiply-add loop, the faster of a large "
            "copy and a large update in place)" if view.peaks
            else "no host peaks stored for this run's host")
    return Chart("roofline", title, _svg(figure),
                 f"Achieved GFLOP/s of each accepted candidate on each target shape (median "
                 f"time, the workload's FLOP and byte model); {note}.")


def rejection_chart(view: RunView) -> Chart:
    title = "Rejections by reason"
    reasons = Counter(f"{e.status}: {e.reason.split(':')[0][:50]}"
                      for e in view.evaluations if e.status != "accepted")
    top = reasons.most_common(10)
    figure, axes = _figure(title, height=max(2.2, 0.35 * len(top) + 1.2))
    if top:
        labels, counts = zip(*reversed(top), strict=True)
        axes.barh(range(len(top)), counts, color="#64748b")
        axes.set_yticks(range(len(top)), labels, fontsize=7)
        axes.set_xlabel("candidates")
    else:
        _empty(axes, f"no rejections among {len(view.evaluations)} evaluations")
    return Chart("rejections", title, _svg(figure),
                 "Every verdict that was not accepted, by status and the first part of its "
                 "reason (the full reasons are in the verdict table).")


def corpus_chart(view: RunView) -> Chart:
    title = "Validation corpus growth"
    figure, axes = _figure(title)
    before = view.builtin_cases + sum(1 for c in view.cases if c.minutes < 0)
    added = sorted(c.minutes for c in view.cases if c.minutes >= 0)
    end = max([view.elapsed_minutes, *added])
    xs = [0.0, *added, end]
    ys = [before, *range(before + 1, before + len(added) + 1), before + len(added)]
    axes.step(xs, ys, where="post", color="#0f766e", linewidth=2)
    found = [(c.minutes, before + i + 1) for i, c in enumerate(
        sorted((c for c in view.cases if c.minutes >= 0), key=lambda c: c.minutes))]
    if found:
        xs_found, ys_found = zip(*found, strict=True)
        axes.scatter(xs_found, ys_found, color=_CHAMPION, zorder=5,
                     label="counterexample or case added")
        axes.legend(fontsize=7, loc="lower right")
    axes.set_ylim(0, max(ys) * 1.2 + 1)
    axes.set_xlabel("minutes since the run started")
    axes.set_ylabel("cases")
    return Chart("corpus", title, _svg(figure),
                 f"{view.builtin_cases} built-in cases, {before - view.builtin_cases} stored "
                 f"before this run, {len(added)} added during it (fuzzing counterexamples "
                 "join the corpus for good).")


def _roofline_points(view: RunView
                     ) -> dict[str, tuple[list[tuple[float, float]], tuple[float, float] | None]]:
    """Per shape: (intensity, GFLOP/s) of every accepted candidate, and of the champion."""
    points: dict[str, tuple[list[tuple[float, float]], tuple[float, float] | None]] = {}
    for e in view.evaluations:
        for timing in e.timings if e.status == "accepted" else ():
            cost = view.shape_costs.get(timing.shape)
            if cost is None or timing.candidate_s.median <= 0:
                continue
            point = (cost.flops / cost.nbytes, cost.flops / timing.candidate_s.median / 1e9)
            others, champion = points.get(timing.shape, ([], None))
            if e.candidate_id == view.champion_id:
                champion = point
            else:
                others.append(point)
            points[timing.shape] = (others, champion)
    return points


def _figure(title: str, height: float = 3.0) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(7.0, height), layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title, loc="left", fontweight="bold")
    return figure, axes


def _empty(axes: Axes, message: str) -> None:
    axes.text(0.5, 0.5, message, transform=axes.transAxes, ha="center", va="center",
              color=_MUTED, fontsize=10)


def _svg(figure: Figure) -> str:
    """The figure as an inline <svg> element (no XML prologue, no fixed pixel size)."""
    buffer = io.StringIO()
    FigureCanvasSVG(figure).print_svg(buffer)
    text = buffer.getvalue()
    return text[text.index("<svg"):]
