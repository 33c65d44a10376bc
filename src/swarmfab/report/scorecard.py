"""The scorecard of a suite of problems, in the field's terms.

Per problem: whether the answer is verified, and its speedup over eager PyTorch and
over default ``torch.compile`` (medians of paired ratios, with their 95% CIs, from the
run's closing table: the champion and the baselines timed side by side). Overall:
``fast_p``, the share of problems whose answer is verified and faster than eager by
more than ``p`` (KernelBench's measure), and geometric means of the speedups. A problem
without a champion answers with eager PyTorch itself (speedup 1, not fast); one that
failed counts in the total and in nothing else.

Where the closing table has no ``torch.compile`` figure (short of time, it times the
champion beside the fastest baselines only, and eager was faster), the speedup over it
is the closing table's speedup over eager times the calibration's eager-to-compile
ratio (both paired ratios, measured side by side), shown without an interval, as for a
problem without a champion.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from swarmfab.knowledge import Store

__all__ = ["FAST_P", "SCORE_EVENT", "ProblemScore", "Scorecard", "record_score",
           "recorded_scores", "score_run", "scorecard_table", "summary_line"]

SCORE_EVENT = "suite-score"  # a problem's score, kept with its run for `suite --resume`

FAST_P = (0.0, 1.0, 1.5, 2.0)
EAGER, COMPILE = "torch-eager", "torch-compile"


@dataclass(frozen=True, slots=True)
class ProblemScore:
    problem: str
    sizes: str = ""
    status: str = "error"  # champion, no-champion, error
    run_id: str | None = None
    evaluations: int = 0
    seconds: dict[str, list[float]] = field(default_factory=dict)  # name -> median, low, high
    over_eager: list[float] | None = None  # median, low, high
    over_compile: list[float] | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    detail: str = ""

    @property
    def verified(self) -> bool:
        return self.status == "champion"


def score_run(problem: str, sizes: str, result: Any, summary: dict[str, Any] | None,
              calibration: dict[str, dict[str, float]] | None) -> ProblemScore:
    """A problem's score from its run: the closing table where there is a champion,
    else the baselines' calibration (eager is then the answer)."""
    base = {"problem": problem, "sizes": sizes, "run_id": result.run_id,
            "evaluations": result.evaluations}
    shapes = (summary or {}).get("shapes") or []
    times = next(iter((calibration or {}).values()), {})
    if result.champion is not None and shapes:
        shape = shapes[0]
        speedups = shape.get("speedups", {})
        over_eager, over_compile = speedups.get(EAGER), speedups.get(COMPILE)
        if over_compile is None and over_eager is not None and times.get(EAGER) and \
                math.isfinite(times.get(COMPILE, math.inf)):
            over_compile = [over_eager[0] * times[COMPILE] / times[EAGER], math.nan, math.nan]
        return ProblemScore(**base, status="champion", seconds=shape["seconds"],
                            over_eager=over_eager, over_compile=over_compile,
                            knobs=dict(result.champion.knobs))
    over_compile = None
    if math.isfinite(times.get(COMPILE, math.inf)) and times.get(EAGER):
        ratio = times[COMPILE] / times[EAGER]
        over_compile = [ratio, math.nan, math.nan]
    return ProblemScore(**base, status="no-champion",
                        seconds={n: [t, math.nan, math.nan] for n, t in times.items()},
                        over_eager=[1.0, 1.0, 1.0], over_compile=over_compile,
                        detail="nothing beat eager PyTorch: the answer is eager")


def record_score(store: Store, score: ProblemScore) -> None:
    """Keep ``score`` with its run, as soon as the problem is done: a suite stopped
    later, whatever stopped it, still has it (``suite --resume``)."""
    if score.run_id is not None:
        store.record_event(score.run_id, SCORE_EVENT, json.dumps(asdict(score)))


def recorded_scores(store: Store, paths: list[Path]) -> dict[Path, ProblemScore]:
    """For each problem file, the score its latest finished run recorded, if any (runs
    are matched by the file's resolved path)."""
    wanted = {path.resolve(): path for path in paths}
    found: dict[Path, ProblemScore] = {}
    for run in reversed(store.runs()):  # latest first
        path = wanted.get(Path(run.workload).resolve())
        if path is None or path in found or run.status != "finished":
            continue
        kept = store.events(run.id, SCORE_EVENT)
        if kept:
            found[path] = ProblemScore(**json.loads(kept[-1][1]))
    return found


@dataclass(frozen=True, slots=True)
class Scorecard:
    problems: list[ProblemScore]

    @property
    def fast(self) -> dict[str, float]:
        total = len(self.problems) or 1
        return {f"fast_{p:g}": sum(s.verified and s.over_eager is not None
                                   and s.over_eager[0] > p for s in self.problems) / total
                for p in FAST_P}

    def geomean(self, which: str) -> float | None:
        values = [getattr(s, which)[0] for s in self.problems
                  if s.status != "error" and getattr(s, which) is not None]
        values = [v for v in values if math.isfinite(v) and v > 0]
        if not values:
            return None
        return math.exp(sum(map(math.log, values)) / len(values))

    def to_dict(self) -> dict[str, Any]:
        return {"problems": [asdict(s) for s in self.problems],
                "verified": sum(s.verified for s in self.problems),
                "total": len(self.problems), **self.fast,
                "geomean_over_eager": self.geomean("over_eager"),
                "geomean_over_compile": self.geomean("over_compile")}


def scorecard_table(card: Scorecard) -> Table:
    table = Table(title="suite scorecard (speedups: medians of paired ratios, 95% CI)",
                  title_justify="left")
    for column in ("problem", "sizes", "answer", "evals", "eager", "torch.compile",
                   "answer time", "over eager", "over torch.compile"):
        table.add_column(column, justify="left" if column in ("problem", "sizes", "answer")
                         else "right")
    for score in card.problems:
        answer = {"champion": "champion", "no-champion": "eager"}.get(score.status, "error")
        own = "champion" if score.verified else EAGER
        table.add_row(score.problem, score.sizes, answer if score.status != "error"
                      else f"error: {score.detail[:60]}", str(score.evaluations),
                      _ms(score.seconds.get(EAGER)), _ms(score.seconds.get(COMPILE)),
                      _ms(score.seconds.get(own)), _x(score.over_eager),
                      _x(score.over_compile))
    return table


def summary_line(card: Scorecard) -> str:
    data = card.to_dict()
    fast = ", ".join(f"{key} {data[key]:.2f}" for key in card.fast)
    eager, compiled = data["geomean_over_eager"], data["geomean_over_compile"]
    return (f"{data['verified']}/{data['total']} problems with a verified champion; {fast}; "
            f"geometric mean speedup over eager {_plain(eager)}, over torch.compile "
            f"{_plain(compiled)}")


def _plain(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(estimate: list[float] | None) -> str:
    if not estimate or not math.isfinite(estimate[0]):
        return "-"
    return f"{estimate[0] * 1e3:.2f} ms"


def _x(estimate: list[float] | None) -> str:
    if not estimate or not math.isfinite(estimate[0]):
        return "-"
    median, low, high = estimate
    if math.isfinite(low) and math.isfinite(high):
        return f"{median:.2f}x [{low:.2f}, {high:.2f}]"
    return f"{median:.2f}x"
