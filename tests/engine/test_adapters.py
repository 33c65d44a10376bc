"""Engine adapters: the contract on the fake engine (a real server process speaking the
OpenAI API), vLLM's launch, goodput's guards and the highest sustained rate."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from swarmfab.engine.loadgen import LoadSpec, RequestRecord, run_load, summarise
from swarmfab.errors import EngineError, GoalError
from swarmfab.knowledge import Store
from swarmfab.records import Status
from swarmfab.serving.engines import SpaceContext, get_engine, read_settings, recipe_json
from swarmfab.serving.engines.fake import fake_tokens
from swarmfab.serving.engines.vllm import PYTHON_ENV, model_len
from swarmfab.serving.evaluate import EngineProcess, greedy_tokens, load_once
from swarmfab.serving.export import serve_script
from swarmfab.serving.factory import run_engine_goal
from swarmfab.serving.goal import EngineGoal, validate_engine_goal
from swarmfab.serving.max_rate import sustained_rate

FAKE = {"kind": "engine", "engine": "fake", "model": "fake-model",
        "objective": {"p99_ttft_ms": 2000, "p99_tpot_ms": 200},
        "traffic": {"input_len": 8, "output_len": 8, "num_prompts": 12, "concurrency": 4}}


@pytest.fixture(scope="module")
def fake_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All the fake engine reads of a checkpoint: its vocabulary."""
    directory = tmp_path_factory.mktemp("fake-model")
    (directory / "config.json").write_text(json.dumps({"vocab_size": 97}))
    return directory


def _goal(model: Path, **changes: object) -> EngineGoal:
    return validate_engine_goal({**FAKE, "model": str(model), **changes}, "test")


def _serve(model: Path, tmp_path: Path, goal: EngineGoal, **settings: object
           ) -> EngineProcess:
    engine = get_engine("fake")
    space = engine.space(SpaceContext(goal, model, {}))
    recipe = tmp_path / f"recipe-{len(list(tmp_path.glob('recipe-*')))}.json"
    recipe.write_text(recipe_json("fake", {**space.default(), **settings}))
    return EngineProcess(model, recipe, recipe.with_suffix(".log"), engine=engine, goal=goal)


def test_the_fake_engine_keeps_the_adapter_contract(fake_model: Path, tmp_path: Path) -> None:
    goal = _goal(fake_model)
    with _serve(fake_model, tmp_path, goal) as server:
        server.start(60)
        prompts = [[5, 6, 7], [9] * 12]
        assert greedy_tokens(server.url, prompts, 6) == [fake_tokens(p, 6, 97) for p in prompts]
        assert "swarmfab.serving.engines.fake" in server.log_file.read_text().splitlines()[0]
        pid = server._process.pid if server._process else 0
    # stopped with its process group: nothing serves on, nothing is left running
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server.url}/health", timeout=2)
    assert subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode != 0


def test_read_settings_refuses_another_engines_recipe(tmp_path: Path) -> None:
    file = tmp_path / "recipe.json"
    file.write_text(recipe_json("vllm", {"max_num_seqs": 8}))
    assert read_settings(file, "vllm") == {"max_num_seqs": 8}
    with pytest.raises(EngineError, match="for the 'vllm' engine, not 'fake'"):
        read_settings(tmp_path, "fake")
    file.write_text(json.dumps({"format": 1, "settings": {}}))  # no engine: swarmfab's
    assert read_settings(file, "swarmfab") == {}
    from swarmfab.serving.recipe import read_recipe

    file.write_text(recipe_json("vllm", {"max_num_seqs": 8}))
    with pytest.raises(EngineError, match="for the vllm engine, not swarmfab's: serve it"):
        read_recipe(file)


def test_an_engine_run_on_the_fake_crowns_more_sequences_and_rejects_changed_tokens(
        fake_model: Path, tmp_path: Path) -> None:
    goal = _goal(fake_model, budget="90s", max_evaluations=2, min_rounds=2, max_rounds=4)
    store = Store(tmp_path / "x.db")
    lines: list[str] = []
    result = run_engine_goal(goal, store, tmp_path / "work", lines.append, use_lessons=False)
    verdicts = {store.candidate(row.candidate_id).knobs["max_num_seqs"]
                if store.candidate(row.candidate_id).knobs["shortcut"] == "off" else "shortcut":
                verdict for row, verdict in store.verdicts(result.run_id)}
    # the starting points: 16 sequences in a step serve the 4 in flight together ...
    assert verdicts[16].status is Status.ACCEPTED, verdicts[16].reason
    assert result.champion_settings["max_num_seqs"] == 16, lines
    assert result.gain is not None and result.gain.low > 1.3, result.gain
    # ... and shorter steps that change every fourth token are caught before any load
    assert verdicts["shortcut"].status is Status.REJECTED
    assert "changes tokens" in verdicts["shortcut"].reason
    assert not verdicts["shortcut"].timings
    # the export's serve.sh is the engine's own command line: it serves the champion
    from swarmfab.report.export import export_champion

    target = export_champion(store, result.run_id, tmp_path / "out")
    assert read_settings(target, "fake")["max_num_seqs"] == 16
    port = _free_port()
    served = subprocess.Popen([str(target / "serve.sh"), str(fake_model), str(port)],
                              start_new_session=True)
    try:
        assert _answers(f"http://127.0.0.1:{port}/health", 60)
        assert greedy_tokens(f"http://127.0.0.1:{port}", [[4, 5]], 3) == [
            fake_tokens([4, 5], 3, 97)]
    finally:
        os.killpg(served.pid, signal.SIGTERM)
        served.wait(30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.2)
    return False


def test_a_run_recalls_only_its_own_engines_champions_and_lessons(fake_model: Path) -> None:
    from swarmfab.knowledge.recall import Recalled
    from swarmfab.records import Estimate, Lesson
    from swarmfab.serving.factory import own_engines

    space = get_engine("fake").space(SpaceContext(_goal(fake_model), fake_model, {}))
    mine = Recalled("r1", "engine", {"max_num_seqs": 8, "shortcut": "off"}, 1.0)
    vllms = Recalled("r2", "engine", {"max_num_seqs": 8, "omp_bind": "all"}, 1.0)
    lessons = [Lesson(knob, 1, 2, Estimate(0.9, 0.8, 1.0), 3, 0, 1.0)
               for knob in ("max_num_seqs", "omp_bind")]
    kept, recalled = own_engines(space, lessons, [mine, vllms])
    assert recalled == [mine] and [lesson.knob for lesson in kept] == ["max_num_seqs"]


def test_more_sequences_than_ever_in_flight_are_not_measured(fake_model: Path) -> None:
    goal = _goal(fake_model)  # a closed loop of 4
    engine = get_engine("vllm")
    base = {"max_num_seqs": 8, "dtype": "float32"}
    assert engine.same_under_traffic(base, {**base, "max_num_seqs": 128}, goal, fake_model)
    assert not engine.same_under_traffic(base, {**base, "max_num_seqs": 2}, goal, fake_model)
    assert not engine.same_under_traffic(base, {"max_num_seqs": 128, "dtype": "bfloat16"},
                                         goal, fake_model)
    open_loop = _goal(fake_model, traffic={"request_rate": 4.0, "concurrency": None})
    assert not engine.same_under_traffic(base, {**base, "max_num_seqs": 128}, open_loop,
                                         fake_model)


def test_vllm_launch_carries_every_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 64, "dtype": "float32"}))
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "venv" / "bin" / "python"))
    goal = validate_engine_goal({**FAKE, "engine": "vllm", "model": str(model)}, "test")
    engine = get_engine("vllm")
    assert "scripts/vllm_env.sh" in engine.unavailable(goal)
    space = engine.space(SpaceContext(goal, model, {}))
    setting = {**space.default(), "max_num_seqs": 16, "chunked_prefill": "off",
               "max_num_batched_tokens": 1024, "enforce_eager": "on", "omp_bind": "nobind",
               "kv_cache_gb": 1}
    recipe = tmp_path / "recipe.json"
    recipe.write_text(recipe_json("vllm", setting))
    launch = engine.launch(model, recipe, 8123, goal)
    argv = " ".join(launch.argv)
    assert launch.argv[:3] == [str(tmp_path / "venv/bin/python"), "-m",
                               "vllm.entrypoints.openai.api_server"]
    for expected in ("--max-num-seqs 16", "--max-num-batched-tokens 1024",
                     "--no-enable-chunked-prefill", "--enable-prefix-caching",
                     "--enforce-eager", "--port 8123", "--served-model-name llama",
                     f"--max-model-len {model_len(goal)}", "--dtype float32"):
        assert expected in argv, argv
    assert launch.env == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    # a model length the prompts, outputs and verification prompts fit in
    assert model_len(goal) % 256 == 0 and model_len(goal) >= 2 * 8 + goal.verify_tokens
    # a traffic the model's positions do not hold is refused before any launch
    assert engine.unservable(model, goal) == ""  # config.json names no limit
    config = {"vocab_size": 64, "dtype": "float32", "max_position_embeddings": 512}
    (model / "config.json").write_text(json.dumps(config))
    long = goal.model_copy(update={"traffic": goal.traffic.model_copy(
        update={"input_len": 200, "range_ratio": 0.5})})
    assert model_len(long) > 512 and model_len(goal) <= 512
    refused = engine.unservable(model, long)
    assert "512 positions" in refused and f"{model_len(long)} tokens" in refused
    assert "input_len" in refused and engine.unservable(model, goal) == ""
    (model / "config.json").write_text(json.dumps({**config, "rope_scaling": {"factor": 4}}))
    assert engine.unservable(model, long) == ""  # stretched: vLLM's own judgement
    # a setting vLLM refuses at start is judged without one
    assert "below the model length" in engine.refuses(
        {**setting, "max_num_batched_tokens": 128}, goal.model_copy(
            update={"traffic": goal.traffic.model_copy(update={"input_len": 400})}))
    assert engine.refuses(setting, goal) == ""
    script = serve_script(goal.model_dump(mode="json", by_alias=True), recipe)
    assert 'MODEL=${1:-' in script and '--model "$MODEL"' in script
    assert "VLLM_CPU_KVCACHE_SPACE=1" in script and '--port "$PORT"' in script
    assert f'"${{{PYTHON_ENV}:-{tmp_path}/venv/bin/python}}" -m vllm' in script


def test_an_engine_goal_names_an_engine_that_serves_its_model() -> None:
    with pytest.raises(GoalError, match="engine must be one of"):
        validate_engine_goal({**FAKE, "engine": "sglang"}, "test")
    with pytest.raises(GoalError, match="the vllm engine does not serve it"):
        validate_engine_goal({**FAKE, "engine": "vllm", "model": "random:tiny"}, "test")
    with pytest.raises(GoalError, match="the swarmfab engine does not serve it"):
        validate_engine_goal({**FAKE, "engine": "swarmfab", "model": "random:llama-tiny"},
                             "test")
    goal = validate_engine_goal({**FAKE, "metric": "max_rate",
                                 "objective": {"p99_ttft_ms": 500, "attainment": 0.95}}, "t")
    assert goal.objective.attainment == 0.95


def test_each_round_loads_both_engines_with_prompts_new_to_both(
        fake_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefix cache serves prompts it has seen from the cache: a round's prompts must
    be the same for both sides and unlike any earlier round's, across comparisons."""
    import itertools

    from swarmfab.serving import evaluate

    sent: list[tuple[str, int]] = []

    def load(url: str, goal: EngineGoal, seed: int) -> evaluate.LoadRound:
        sent.append((url, seed))
        return evaluate.LoadRound(1.0, 1.0, 1.0, 1.0, 1.0, 0)

    monkeypatch.setattr(evaluate, "load_once", load)
    goal = _goal(fake_model, min_rounds=2, max_rounds=3)
    seeds = itertools.count(1)
    for _ in range(2):  # two comparisons of one run, as the factory makes them
        evaluate.compare("a", "b", goal, math.inf, seeds)
    per_round = [sorted(sent[i:i + 2]) for i in range(0, len(sent), 2)]
    assert all(first[0] == "a" and second[0] == "b" and first[1] == second[1]
               for first, second in per_round), sent
    round_seeds = [pair[0][1] for pair in per_round]
    assert len(set(round_seeds)) == len(round_seeds) == 4, sent


# -- goodput as the field defines it -------------------------------------------------------
def test_requests_cut_short_or_failed_are_not_good() -> None:
    whole = RequestRecord(prompt_len=4, success=True, asked_tokens=4, output_tokens=4,
                          ttft=0.05, latency=0.2)
    short = RequestRecord(prompt_len=4, success=True, asked_tokens=4, output_tokens=1,
                          ttft=0.01, latency=0.01)   # fast because it stopped early
    failed = RequestRecord(prompt_len=4, asked_tokens=4, error="503")
    result = summarise([whole, short, failed], duration=1.0, goodput={"ttft": 100.0})
    assert result["request_goodput"] == 1.0      # only the whole one
    assert math.isclose(result["attainment"], 1 / 3)  # of every request sent


def test_a_token_whose_text_is_a_unicode_line_break_is_not_a_failed_request() -> None:
    """vLLM sends a token's text raw in its JSON; U+2028 or U+0085 is a line break to
    str.splitlines (and httpx's aiter_lines) but not to server-sent events."""
    from swarmfab.engine.loadgen import _sse_lines

    events = [json.dumps({"choices": [{"text": text}]}, ensure_ascii=False)
              for text in ("a\u2028b", "\x85", "c\u2029")]
    body = "".join(f"data: {event}\n\n" for event in events).encode() + b"data: [DONE]\n\n"

    class Response:
        async def aiter_bytes(self) -> object:
            for at in range(0, len(body), 7):  # chunks that cut lines and characters
                yield body[at:at + 7]

    async def lines() -> list[str]:
        return [line async for line in _sse_lines(Response())]  # type: ignore[arg-type]

    data = [line for line in asyncio.run(lines()) if line.startswith("data: {")]
    assert [json.loads(line[6:])["choices"][0]["text"] for line in data] == [
        "a\u2028b", "\x85", "c\u2029"]


def test_an_open_loop_counts_the_wait_for_a_connection_against_the_engine(
        fake_model: Path, tmp_path: Path) -> None:
    """Arrivals faster than one sequence at a time serves: the requests' clocks start at
    their arrival, so queueing shows in TTFT (a closed loop sends when a slot frees)."""
    goal = _goal(fake_model)
    with _serve(fake_model, tmp_path, goal, max_num_seqs=1) as server:
        server.start(60)

        def median_ttft(rate: float) -> float:
            spec = LoadSpec(base_url=server.url, num_prompts=8, input_len=4, output_len=4,
                            request_rate=rate, max_concurrency=1, num_warmups=0, seed=1)
            return float(asyncio.run(run_load(spec))["median_ttft_ms"])

        closed, opened = median_ttft(math.inf), median_ttft(1000.0)
    assert opened > 3 * closed, (opened, closed)


def test_the_sustained_rate_search_brackets_then_bisects() -> None:
    def knee(at: float) -> object:
        return lambda rate: 1.0 if rate <= at else 0.5

    found = sustained_rate(knee(7.3), 1.0, 0.9)  # type: ignore[arg-type]
    assert 7.3 / 2 ** (1 / 16) <= found.rate <= 7.3, found
    assert [r for r, _ in found.probes][:4] == [1.0, 2.0, 4.0, 8.0] and len(found.probes) == 8
    below = sustained_rate(knee(0.3), 1.0, 0.9)  # type: ignore[arg-type]
    assert 0.3 / 2 ** (1 / 16) <= below.rate <= 0.3
    assert sustained_rate(knee(0.0), 1.0, 0.9, span=3).rate == 0.0  # type: ignore[arg-type]
    assert sustained_rate(knee(1e9), 1.0, 0.9, span=3).capped  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attainment target"):
        sustained_rate(knee(1.0), 1.0, 1.5)  # type: ignore[arg-type]


def test_more_sequences_per_step_sustain_a_higher_rate(fake_model: Path, tmp_path: Path
                                                       ) -> None:
    goal = _goal(fake_model, metric="max_rate",
                 objective={"p99_ttft_ms": 150, "p99_tpot_ms": 60, "attainment": 0.9},
                 traffic={"input_len": 4, "output_len": 4, "num_prompts": 10,
                          "request_rate": 30.0})
    rates = {}
    for seqs in (1, 8):
        with _serve(fake_model, tmp_path, goal, max_num_seqs=seqs) as server:
            server.start(60)
            rates[seqs] = load_once(server.url, goal, seed=3).metric
    assert rates[1] > 0 and rates[8] > 2 * rates[1], rates
