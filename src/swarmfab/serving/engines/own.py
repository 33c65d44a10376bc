"""swarmfab's own engine (:mod:`swarmfab.engine`) as an adapter: ``swarmfab serve MODEL
--recipe FILE``, its knobs those of :func:`~swarmfab.serving.recipe.engine_space` (with
the kernel factory's KDA champions where the store holds them for a host like this)."""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path
from typing import Any

from swarmfab.errors import import_extra
from swarmfab.kernels import DesignSpace, Setting
from swarmfab.serving.engines.base import EngineAdapter, Launch, SpaceContext, same_batches

__all__ = ["OwnEngine", "auto_threads", "same_under_traffic"]


class OwnEngine(EngineAdapter):
    name = "swarmfab"

    def space(self, context: SpaceContext) -> DesignSpace:
        from swarmfab.serving.recipe import engine_space, kda_champions

        champions = None if context.store is None else kda_champions(context.store,
                                                                     context.host)
        return engine_space(context.goal.threads, kda=champions)

    def launch(self, model_dir: Path, recipe_file: Path, port: int, goal: Any) -> Launch:
        return Launch([sys.executable, "-m", "swarmfab", "serve", str(model_dir),
                       "--port", str(port), "--recipe", str(recipe_file)],
                      {"SWARMFAB_API_KEY": ""})

    def same_under_traffic(self, setting: Setting, other: Setting, goal: Any,
                           model_dir: Path) -> bool:
        return same_under_traffic(dict(setting), dict(other), goal,
                                  _auto_threads(str(model_dir)))


@functools.cache
def _auto_threads(model_dir: str) -> dict[str, int]:
    return auto_threads(Path(model_dir)) if os.path.isdir(model_dir) else {}


def same_under_traffic(setting: dict[str, Any], other: dict[str, Any], goal: Any,
                       auto_threads: dict[str, int] | None = None) -> bool:
    """Whether two settings must serve the goal's traffic alike: ``threads = "auto"``
    being the count it resolves to for the setting's dtype (``auto_threads``), they are
    the same, or differ only in ``max_num_seqs`` while both allow at least the requests
    the traffic keeps in flight (its concurrency), so the scheduler runs the same
    batches either way."""
    return same_batches(_resolved(setting, auto_threads or {}),
                        _resolved(other, auto_threads or {}), goal)


def _resolved(setting: dict[str, Any], auto_threads: dict[str, int]) -> dict[str, Any]:
    count = auto_threads.get(str(setting.get("dtype", "float32")))
    return {**setting, "threads": count} if setting.get("threads") == "auto" and count \
        else setting


def auto_threads(model_dir: Path) -> dict[str, int]:
    """The intra-op threads ``threads = "auto"`` gives an engine of this checkpoint, per
    dtype (the engine decides by the bytes of its weights)."""
    from swarmfab.engine.engine import DTYPES, EngineConfig

    safe_open = import_extra("safetensors", "engine", 'an engine goal (kind = "engine")'
                             ).safe_open

    parameters = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), "pt") as tensors:
            for name in tensors.keys():  # noqa: SIM118 (the handle is not iterable)
                parameters += math.prod(tensors.get_slice(name).get_shape())
    return {name: EngineConfig(dtype=name).intra_op_threads(
        parameters * dtype.itemsize) for name, dtype in DTYPES.items()}


