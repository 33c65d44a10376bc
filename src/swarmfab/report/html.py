"""The run report as HTML: one self-contained file, or the body a dashboard page embeds.

Styles are inlined and charts are inline SVG, so the file opens anywhere without a
network; nothing in it is fetched.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from swarmfab.errors import MissingExtraError, SwarmfabError

try:  # the report extra (torch brings jinja2 too)
    from jinja2 import Environment, PackageLoader, select_autoescape
except ImportError as exc:
    raise MissingExtraError("jinja2", "report", "the HTML report") from exc
from swarmfab.knowledge import Store
from swarmfab.report.charts import all_charts
from swarmfab.report.run_view import RunView, load_run_view

__all__ = ["render_run_body", "render_standalone", "templates", "write_report"]


@cache
def templates() -> Environment:
    return Environment(loader=PackageLoader("swarmfab.report", "templates"),
                       autoescape=select_autoescape(["html", "j2"]),
                       trim_blocks=True, lstrip_blocks=True)


def _context(view: RunView) -> dict[str, Any]:
    return {
        "v": view, "charts": all_charts(view), "final": view.summary.get("shapes") or [],
        "rejected": [e for e in view.evaluations if e.status != "accepted"],
        "added_cases": [c for c in view.cases if c.this_run],
        "goal_json": json.dumps(view.goal, indent=2, default=str),
    }


def render_run_body(view: RunView) -> str:
    """The run's sections (overview, figures, charts, lineage, lessons, machine)."""
    return templates().get_template("run_body.html.j2").render(_context(view))


def render_standalone(view: RunView, store_label: str) -> str:
    """A complete HTML document for one run."""
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return templates().get_template("report.html.j2").render(
        {**_context(view), "generated": generated, "store": store_label})


def write_report(store: Store, run_id: str | None, out: Path) -> Path:
    """Write run ``run_id`` (id, ``latest`` or None) as one HTML file at ``out``."""
    page = render_standalone(load_run_view(store, run_id), store.url)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise SwarmfabError(f"cannot write the report to {out}: {exc}") from exc
    return out
