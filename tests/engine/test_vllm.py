"""vLLM for real (``make test-integration``, which makes its venv first): the adapter starts
vLLM's OpenAI server on a random Llama-style model, verification and load go through it
as through swarmfab's engine, and stopping it leaves nothing running. Skipped, saying so,
only where vLLM's environment could not be made (``scripts/vllm_env.sh``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from swarmfab.engine.tiny import make_checkpoint
from swarmfab.serving.engines import SpaceContext, get_engine, recipe_json
from swarmfab.serving.evaluate import EngineProcess, greedy_tokens, load_once, verify_prompts
from swarmfab.serving.goal import validate_engine_goal
from swarmfab.serving.numerics import score_continuations

pytestmark = pytest.mark.integration


def test_vllm_serves_a_recipe_through_the_adapter(tmp_path: Path) -> None:
    engine = get_engine("vllm")
    model = make_checkpoint(tmp_path / "llama-tiny", "llama-tiny")
    goal = validate_engine_goal({
        "kind": "engine", "engine": "vllm", "model": str(model),
        "objective": {"p99_ttft_ms": 60_000},
        "traffic": {"input_len": 16, "output_len": 8, "num_prompts": 8, "concurrency": 4},
    }, "test")
    missing = engine.unavailable(goal)
    if missing:
        pytest.skip(missing)
    space = engine.space(SpaceContext(goal, model, {}))
    recipe = tmp_path / "recipe.json"
    recipe.write_text(recipe_json("vllm", {**space.default(), "enforce_eager": "on",
                                           "kv_cache_gb": 1, "max_num_seqs": 8}))
    with EngineProcess(model, recipe, tmp_path / "vllm.log", engine=engine, goal=goal) as vllm:
        vllm.start(600)
        prompts = verify_prompts(goal, 512)
        tokens = greedy_tokens(vllm.url, prompts, goal.verify_tokens)
        assert all(len(t) == goal.verify_tokens for t in tokens)
        assert greedy_tokens(vllm.url, prompts, goal.verify_tokens) == tokens  # greedy
        scores = score_continuations(vllm.url, prompts, tokens)  # echo + logprobs
        assert [list(s.best) for s in scores] == tokens  # its own greedy choice, re-scored
        served = load_once(vllm.url, goal, seed=1)
        assert served.failed == 0 and served.request_goodput > 0, served
        group = vllm._process.pid if vllm._process else 0
    # the API server, its engine core and worker were one process group: stop() returns
    # once none of it is left
    from swarmfab.serving.evaluate import _group_members

    assert _group_members(group) == []
    assert "--enforce-eager" in (tmp_path / "vllm.log").read_text().splitlines()[0]
    assert os.environ.get("SWARMFAB_VLLM_PYTHON") or Path(".venv-vllm").exists()
