"""Engine adapters: the serving engines the engine factory tunes, one module each.

``base``: the contract (:class:`EngineAdapter`). ``own``: swarmfab's engine. ``vllm``:
vLLM's OpenAI server from an environment of its own. ``fake``: an engine that simulates a
continuous-batching server over the OpenAI API in a few lines, for tests of the contract
and of the factory (its knobs change its speed in known ways, and one of them its
tokens).
"""

from __future__ import annotations

from swarmfab.errors import GoalError
from swarmfab.serving.engines.base import (
    RECIPE_FILE,
    EngineAdapter,
    Launch,
    SpaceContext,
    read_settings,
    recipe_json,
)

__all__ = ["ENGINES", "RECIPE_FILE", "EngineAdapter", "Launch", "SpaceContext",
           "get_engine", "read_settings", "recipe_json"]

ENGINES = ("swarmfab", "vllm", "fake")


def get_engine(name: str) -> EngineAdapter:
    """The adapter named ``name``."""
    if name == "swarmfab":
        from swarmfab.serving.engines.own import OwnEngine

        return OwnEngine()
    if name == "vllm":
        from swarmfab.serving.engines.vllm import VllmEngine

        return VllmEngine()
    if name == "fake":
        from swarmfab.serving.engines.fake import FakeEngine

        return FakeEngine()
    raise GoalError(f"no engine {name!r}; choose from {', '.join(ENGINES)}")
