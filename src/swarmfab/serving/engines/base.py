"""The contract of an engine adapter: what the engine factory needs to tune one engine.

An adapter says, for one serving engine:

- whether it can run here (:meth:`EngineAdapter.unavailable`: the engine's environment
  is missing, say, and how to make it);
- its knobs and their domains (:meth:`EngineAdapter.space`, a
  :class:`~swarmfab.kernels.DesignSpace` whose candidates are recipes): the swarm's
  domain agents search it as they search a kernel's; a setting the engine would refuse
  (:meth:`EngineAdapter.refuses`) is judged without a start;
- how to start a server of a recipe on a loopback port (:meth:`EngineAdapter.launch`:
  the command, its environment and the readiness path) and the same as a command line
  a user can run (:meth:`EngineAdapter.command_line`);
- which settings must serve a traffic alike (:meth:`EngineAdapter.same_under_traffic`),
  so the search does not measure noise.

What is common to every engine is not here: the server runs in a session of its own,
bounded by the start-up timeout, stopped by SIGTERM to its process group and then
SIGKILL (:class:`~swarmfab.serving.evaluate.EngineProcess`); verification and metrics go
through the OpenAI HTTP API (completions with token ids, streamed with usage), which
every adapted engine speaks. A recipe is the engine's launch settings, one JSON file
``recipe.json`` ({"format": 1, "engine": NAME, "settings": {...}}); the engine's own
adapter reads it without the "engine" key too.
"""

from __future__ import annotations

import json
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmfab.errors import EngineError
from swarmfab.kernels import DesignSpace, Setting

__all__ = ["FORMAT", "RECIPE_FILE", "EngineAdapter", "Launch", "SpaceContext", "load_recipe",
           "read_settings", "recipe_json", "same_batches"]

RECIPE_FILE = "recipe.json"
FORMAT = 1


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one server: the command, what it adds to the environment, and the
    path that answers 200 once it serves."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str = "/health"

    def shell(self) -> str:
        """One shell line: the added environment, then the command."""
        prefix = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        return " ".join([*prefix, shlex.join(self.argv)])


@dataclass(frozen=True, slots=True)
class SpaceContext:
    """What a space may depend on: the goal, the checkpoint, the host, and the store
    where earlier runs' champions are (``None`` with ``--no-lessons``)."""

    goal: Any
    model_dir: Path
    host: Mapping[str, Any]
    store: Any = None


class EngineAdapter(ABC):
    """One serving engine, as the engine factory drives it."""

    name: str
    # True when a recipe of another dtype than the default's is judged by the accuracy
    # gate (teacher-forced log-probabilities through completions with echo and logprobs)
    scores_numerics: bool = True

    def unavailable(self, goal: Any) -> str:
        """Why the engine cannot run here ("" when it can), with what to do about it."""
        return ""

    def unservable(self, model_dir: Path, goal: Any) -> str:
        """Why the engine would refuse to serve ``model_dir`` for the goal's traffic
        whatever the recipe ("" when it would not), with what to change: judged from the
        checkpoint before any server starts."""
        return ""

    @abstractmethod
    def space(self, context: SpaceContext) -> DesignSpace:
        """The engine's knobs for this goal and host; its default is the engine's
        default configuration, the reference every recipe is verified against."""

    def refuses(self, setting: Setting, goal: Any) -> str:
        """Why the engine would refuse ``setting`` at start ("" when it would not)."""
        return ""

    @abstractmethod
    def launch(self, model_dir: Path, recipe_file: Path, port: int, goal: Any) -> Launch:
        """The command serving ``model_dir`` with the recipe in ``recipe_file`` on
        127.0.0.1:``port``."""

    def command_line(self, model_dir: Path, recipe_file: Path, goal: Any,
                     port: int = 8000) -> str:
        """The launch as one shell line a user can run."""
        return self.launch(model_dir, recipe_file, port, goal).shell()

    def same_under_traffic(self, setting: Setting, other: Setting, goal: Any,
                           model_dir: Path) -> bool:
        """Whether two settings must serve the goal's traffic alike: the same, or
        differing only in ``max_num_seqs`` while both allow every request the traffic
        keeps in flight (its concurrency), so the scheduler runs the same batches."""
        return same_batches(setting, other, goal)


def same_batches(setting: Setting, other: Setting, goal: Any) -> bool:
    """The same settings, or ones that differ only in ``max_num_seqs``, both at or above
    the traffic's concurrency (a closed loop never has more requests in flight)."""
    changed = {k for k in {*setting, *other} if setting.get(k) != other.get(k)}
    in_flight = goal.traffic.concurrency
    return not changed or (changed == {"max_num_seqs"} and in_flight is not None and all(
        isinstance(s.get("max_num_seqs"), int) and int(s["max_num_seqs"]) >= in_flight
        for s in (setting, other)))


def recipe_json(engine: str, settings: Mapping[str, Any]) -> str:
    """A recipe file's text."""
    body = {"format": FORMAT, "engine": engine, "settings": dict(settings)}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def load_recipe(path: Path) -> tuple[Path, dict[str, Any]]:
    """The recipe file (``path``: recipe.json or a directory holding one) and its JSON,
    which names its engine ("swarmfab" when it names none, as the engine's own recipes
    were written); an EngineError when it cannot be read or is no format-1 recipe."""
    file = path / RECIPE_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EngineError(f"no recipe at {file}: give an exported engine run's directory "
                          f"or its {RECIPE_FILE}") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngineError(f"recipe {file} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT \
            or not isinstance(data.get("settings"), dict):
        raise EngineError(f"recipe {file} is not a format-{FORMAT} engine recipe "
                          '({"format": 1, "engine": NAME, "settings": {...}})')
    return file, {**data, "engine": data.get("engine", "swarmfab")}


def read_settings(path: Path, engine: str) -> dict[str, Any]:
    """The settings of a recipe for ``engine`` (:func:`load_recipe`)."""
    file, data = load_recipe(path)
    if data["engine"] != engine:
        raise EngineError(f"recipe {file} is for the {data['engine']!r} engine, not "
                          f"{engine!r}")
    return dict(data["settings"])
