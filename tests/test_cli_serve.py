"""`swarmfab serve` checks the checkpoint (config, weights, tokenizer) with the engine's
own loading before it announces anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app

CONFIG = {"model_type": "kimi_linear", "num_hidden_layers": 1, "vocab_size": 16,
          "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 1}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "has no config.json"),
        ({"config.json": "{not json"}, "is not valid JSON"),
        ({"config.json": json.dumps(CONFIG)}, "holds no *.safetensors file"),
        ({"config.json": json.dumps(CONFIG), "tokenizer.json": "{broken"},
         "cannot be loaded as a tokenizer"),
    ],
    ids=["empty-directory", "broken-config", "no-weights", "broken-tokenizer"],
)
def test_serve_refuses_an_unservable_checkpoint_before_announcing(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = CliRunner().invoke(app, ["serve", str(tmp_path), "--port", "1"])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "serving" not in result.output  # nothing announced for a model that cannot load
    assert "Traceback" not in result.output
