"""``swarmfab model``'s answer as one HTML page: where the time went before and after,
each part's share, speedup and outcome, the model's speedups with their intervals and
the Amdahl figures beside them, and the end-to-end check.

It reads the study as its JSON form (``Study.to_dict()``), so this package needs nothing
of :mod:`swarmfab.model`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarmfab.report.charts import _figure, _svg
from swarmfab.report.html import templates

__all__ = ["share_chart", "write_model_report"]


def share_chart(study: dict[str, Any]) -> str:
    """Each phase's time split by part, as profiled and as patched (inline SVG)."""
    rows = [(f"{profile['label']}", profile) for profile in study["profiles"]]
    rows += [(f"{profile['label']}, patched", profile) for profile in study.get("after", [])]
    figure, axes = _figure("where the time goes (share of each phase)", 1.0 + 0.5 * len(rows))
    names = []
    for profile in study["profiles"]:
        names += [part["class_name"] for part in profile["parts"][:5]
                  if part["class_name"] not in names]
    colours = {name: f"C{index % 10}" for index, name in enumerate(names)}
    for row, (_, profile) in enumerate(reversed(rows)):
        scale = profile["seconds"] / max(p["seconds"] for _, p in rows)
        left = 0.0
        for part in profile["parts"]:
            width = part["share"] * scale
            name = part["class_name"]
            axes.barh(row, width, left=left, color=colours.get(name, "0.8"),
                      label=name if name in colours and row == len(rows) - 1 else None)
            left += width
    axes.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    axes.set_xlabel("time, relative to the slowest row")
    axes.legend(loc="lower right", fontsize=8)
    return _svg(figure)


def write_model_report(study: dict[str, Any], out: Path) -> Path:
    """The study as one self-contained HTML file at ``out``."""
    page = templates().get_template("model.html.j2").render(
        s=study, chart=share_chart(study),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    out.write_text(page)
    return out
