"""An engine run's champion as a serving recipe, with the evidence behind it.

``swarmfab export RUN --out DIR`` writes ``DIR/<name>/``: ``recipe.json`` (what
``swarmfab serve MODEL --recipe DIR/<name>`` reads), ``provenance.json`` (the goal, the
host, every crowned step's verdict, the closing side-by-side measurement) and
``EVIDENCE.md``, the same for a reader. For another engine (vLLM), ``serve.sh [MODEL
[PORT]]`` is the engine's own command line with the recipe's settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarmfab.errors import SwarmfabError
from swarmfab.knowledge import Store
from swarmfab.records import Candidate
from swarmfab.serving.recipe import RECIPE_FILE

__all__ = ["export_recipe"]


def export_recipe(store: Store, run: Any, champion: Candidate, out: Path,
                  name: str | None = None) -> Path:
    if champion.agent == "default":
        raise SwarmfabError(f"run {run.id}: no recipe beat the engine's default settings; "
                            "there is nothing to export")
    target = out / (name or "engine_recipe")
    target.mkdir(parents=True, exist_ok=True)
    (target / RECIPE_FILE).write_text(champion.sources[champion.entry])
    verdicts = {row.candidate_id: verdict for row, verdict in store.verdicts(run.id)}
    crowned = [detail for kind, detail in store.events(run.id, "champion")]
    summary = run.summary or {}
    provenance = {
        "run": run.id, "goal": run.goal, "host": run.host, "candidate": champion.id,
        "settings": champion.knobs, "verdict": verdicts[champion.id].to_dict(),
        "crowned_steps": crowned, "closing": summary,
    }
    (target / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str))
    (target / "EVIDENCE.md").write_text(_evidence(run, champion, crowned, summary))
    engine = run.goal.get("engine", "swarmfab")
    if engine != "swarmfab":
        script = target / "serve.sh"
        script.write_text(serve_script(run.goal, target / RECIPE_FILE))
        script.chmod(0o755)
    return target


_MODEL = "__MODEL_DIR__"


def serve_script(goal_data: dict[str, Any], recipe: Path) -> str:
    """``serve.sh [MODEL [PORT]]``: the engine's command line serving with ``recipe``
    (MODEL: the run's model directory by default)."""
    from swarmfab.serving.engines import get_engine
    from swarmfab.serving.goal import validate_engine_goal

    goal = validate_engine_goal(goal_data, "the run's goal")
    engine = get_engine(goal.engine)
    line = engine.command_line(Path(_MODEL), recipe, goal, port=8000)
    line = line.replace(f"--served-model-name {_MODEL}",
                        '--served-model-name "$(basename "$MODEL")"')
    line = line.replace(_MODEL, '"$MODEL"').replace("--port 8000", '--port "$PORT"')
    if goal.engine == "vllm":  # its environment here, unless the user names another
        from swarmfab.serving.engines.vllm import PYTHON_ENV, VllmEngine

        python = str(VllmEngine().python(goal))
        line = line.replace(python, f'"${{{PYTHON_ENV}:-{python}}}"', 1)
    model = goal.model if not goal.model.startswith("random:") else ""
    return ("#!/bin/sh\n"
            f"# {goal.engine} serving MODEL with the recipe in {recipe.name}; made by "
            "swarmfab export\n"
            f'MODEL=${{1:-{model}}}\nPORT=${{2:-8000}}\n'
            'test -n "$MODEL" || { echo "usage: serve.sh MODEL_DIR [PORT]" >&2; exit 2; }\n'
            f"exec env {line}\n")


def _evidence(run: Any, champion: Candidate, crowned: list[str],
              summary: dict[str, Any]) -> str:
    goal = run.goal
    gain = summary.get("gain")
    lines = [
        f"# Engine recipe from run {run.id}", "",
        f"Model: `{goal['model']}`. Traffic: {json.dumps(goal['traffic'])}. "
        f"Objective: {json.dumps(goal['objective'])}. Metric: {goal['metric']}.", "",
        "## Settings", "",
        *(f"- `{knob}` = `{value}`" for knob, value in sorted(champion.knobs.items())), "",
        "## Measured", "",
    ]
    if gain:
        lines.append(f"Default and champion side by side at the end of the run: "
                     f"{goal['metric']} {summary.get('default_metric', 0):.3g} -> "
                     f"{summary.get('champion_metric', 0):.3g}, x{gain[0]:.2f} "
                     f"(95% CI {gain[1]:.2f}-{gain[2]:.2f}).")
    lines += ["", "Every greedy token of the verification prompts equals the default "
              "engine's.", "", "## Crowned steps", "", *(f"1. {step}" for step in crowned),
              "", f"Host: {run.host.get('cpu', '?')}, {run.host.get('threads', '?')} "
              f"thread(s), torch {run.host.get('torch', '?')}.", ""]
    return "\n".join(lines)
