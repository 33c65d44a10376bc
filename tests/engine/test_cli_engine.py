"""`swarmfab serve` and `swarmfab loadgen` at the command line: clear refusals, JSON out."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from swarmfab.cli import app

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
