"""The tiny random-weight Kimi Linear checkpoint, made once per session with transformers."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from swarmfab.engine.async_engine import AsyncEngine
from swarmfab.engine.engine import EngineConfig, LLMEngine
from swarmfab.engine.server import create_app
from swarmfab.engine.tiny import make_tiny_checkpoint

API_KEY = "test-key-123"



@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", minversion="5.19")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-kimi-linear"))


@pytest.fixture(scope="session")
def hf_model(tiny_model: Path) -> Any:
    """The same checkpoint loaded by transformers, the reference for logits and tokens."""
    from transformers import KimiLinearForCausalLM

    return KimiLinearForCausalLM.from_pretrained(str(tiny_model)).eval()


@pytest.fixture(scope="session")
def served(tiny_model: Path) -> Iterator[tuple[str, LLMEngine]]:
    """The engine behind a real uvicorn on loopback, with an API key (``API_KEY``): the
    server's URL, and the engine (for a test that slows its steps down)."""
    engine = LLMEngine.from_pretrained(tiny_model, EngineConfig(
        max_num_seqs=4, num_kv_blocks=32, block_size=16, max_num_batched_tokens=64))
    app = create_app(AsyncEngine(engine), "tiny", api_key=API_KEY)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                   log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uvicorn_server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", engine
    uvicorn_server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def server(served: tuple[str, LLMEngine]) -> str:
    """The URL of the engine's server (see ``served``)."""
    return served[0]
