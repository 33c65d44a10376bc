"""`swarmfab serve` and `swarmfab loadgen` at the command line: clear refusals, JSON out."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.engine.async_engine import AsyncEngine
from swarmfab.engine.engine import LLMEngine
from swarmfab.engine.request import RequestOutput, SamplingParams

runner = CliRunner()


def test_serve_refuses_a_directory_without_a_checkpoint(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", str(tmp_path), "--port", "1"])
    assert result.exit_code == 1
    assert "no config.json" in result.output


def test_loadgen_refuses_an_unknown_slo() -> None:
    result = runner.invoke(app, ["loadgen", "--goodput", "latency:5"])
    assert result.exit_code == 2
    assert "ttft:MS" in result.output


def test_loadgen_writes_vllm_style_json(server: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = runner.invoke(app, [
        "loadgen", "--base-url", server, "--num-prompts", "3", "--input-len", "8",
        "--output-len", "3", "--max-concurrency", "3", "--goodput", "e2el:60000",
        "--result-file", str(out)], env={"SWARMFAB_API_KEY": "test-key-123"})
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["completed"] == 3 and saved["request_goodput"] > 0
    assert "median_tpot_ms" in result.output


def test_a_kda_kernel_file_fills_both_kda_slots(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from swarmfab.cli import _kda_slots
    from swarmfab.workloads import design_space, get_workload

    space = design_space("kda")
    candidate = space.instantiate(space.default(), threads=1)
    source = tmp_path / "champion.c"
    source.write_text(candidate.sources[candidate.entry])
    monkeypatch.chdir(tmp_path)
    slots = _kda_slots(source)
    assert slots.labels["kda_prefill"] == slots.labels["kda_decode"] == "c:champion.c"
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 2, 16, generator=generator) * 0.3 for _ in range(3))
    g = -torch.rand(1, 5, 2, 16, generator=generator)
    beta = torch.rand(1, 5, 2, generator=generator)
    reference = get_workload("kda").baselines()["torch-recurrent"]
    out, state = slots.kda_prefill(q, k, v, g, beta, initial_state=None,
                                   output_final_state=True)
    expected, expected_state = reference(q, k, v, g, beta, output_final_state=True)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(state, expected_state, atol=1e-5)


def test_an_exported_champion_fills_both_kda_slots_with_its_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exported package's directory: the engine calls its operator, the pool updated
    in place at the engine's slots, and its call counter shows it ran."""
    import json as json_

    import torch

    from swarmfab.cli import _kda_slots
    from swarmfab.report.export import init_source
    from swarmfab.workloads import design_space, get_workload

    class Run:
        workload, id = "kda", "r1"

    space = design_space("kda")
    candidate = space.instantiate(space.default(), threads=1)
    package = tmp_path / "exported" / "slots_champion"
    package.mkdir(parents=True)
    (package / candidate.entry).write_text(candidate.sources[candidate.entry])
    (package / "__init__.py").write_text(init_source("slots_champion", Run(), candidate, []))
    (package / "provenance.json").write_text(json_.dumps({"candidate": candidate.id}))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    slots = _kda_slots(tmp_path / "exported")
    assert slots.labels["kda_decode"] == "exported:slots_champion"
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, 2, 16, generator=generator) * 0.3 for _ in range(3))
    g, beta = -torch.rand(2, 1, 2, 16, generator=generator), torch.rand(2, 1, 2)
    pool = torch.randn(4, 2, 16, 16, generator=generator)
    slots_of = torch.tensor([3, 0])
    expected, expected_pool = get_workload("kda").baselines()["torch-recurrent"](
        q, k, v, g, beta, initial_state=pool.clone(), inplace_final_state=True,
        state_indices=slots_of)
    out, after = slots.kda_decode(q, k, v, g, beta, initial_state=pool,
                                  inplace_final_state=True, state_indices=slots_of)
    assert after is pool and torch.allclose(pool, expected_pool, atol=1e-5)
    assert torch.allclose(out, expected, atol=1e-5)
    import slots_champion

    assert slots_champion.calls["forward_pool"] == 1


def test_a_directory_without_an_exported_champion_is_refused(tmp_path: Path) -> None:
    from swarmfab.cli import _kda_slots
    from swarmfab.errors import EngineError

    with pytest.raises(EngineError, match="holds no exported champion"):
        _kda_slots(tmp_path)


def test_serve_on_a_taken_port_fails_with_a_clear_error(tiny_model: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["serve", str(tiny_model), "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"the server on 127.0.0.1:{port} did not start" in result.output


def test_run_with_steps_in_the_calling_thread_and_returns_main_s_result(
    tiny_model: Path
) -> None:
    """The engine steps in the caller's thread, the event loop in a helper; the
    coroutine's result comes back, and so does its exception."""
    engine = LLMEngine.from_pretrained(tiny_model)
    stepped_in: set[str] = set()
    step = engine.step

    def recording_step() -> list[RequestOutput]:
        stepped_in.add(threading.current_thread().name)
        return step()

    engine.step = recording_step  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)

    async def client(driver: AsyncEngine) -> list[int]:
        assert threading.current_thread() is not threading.main_thread()
        tokens: list[int] = []
        async for output in driver.generate([5, 9, 33], params):
            tokens += output.token_ids
        return tokens

    driver = AsyncEngine(engine)
    tokens = driver.run_with(lambda: client(driver))
    assert tokens == engine.generate([[5, 9, 33]], params)[0]
    assert stepped_in == {threading.main_thread().name}

    async def broken() -> None:
        raise ValueError("the client failed")

    with pytest.raises(ValueError, match="the client failed"):
        AsyncEngine(engine).run_with(broken)
