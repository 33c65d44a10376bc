"""The tiny random-weight Kimi Linear checkpoint, made once per session with transformers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from swarmfab.engine.tiny import make_tiny_checkpoint

pytest.importorskip("transformers", minversion="5.19")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-kimi-linear"))


@pytest.fixture(scope="session")
def hf_model(tiny_model: Path):  # type: ignore[no-untyped-def]
    """The same checkpoint loaded by transformers, the reference for logits and tokens."""
    from transformers import KimiLinearForCausalLM

    return KimiLinearForCausalLM.from_pretrained(str(tiny_model)).eval()
