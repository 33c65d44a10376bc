"""The OpenAI-compatible server: a real uvicorn on loopback, the official openai client."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from swarmfab.engine.engine import LLMEngine
from swarmfab.engine.request import RequestOutput

API_KEY = "test-key-123"
STEP_DELAY_S = 0.05  # per engine step, where a test needs generation to be slow


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)


def _metric(server: str, name: str) -> float:
    text = httpx.get(f"{server}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    line = next(row for row in text.splitlines() if row.startswith(f"swarmfab:{name} "))
    return float(line.split()[1])


def test_completions_whole_and_streamed_agree(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="kane tori", max_tokens=12,
                                      temperature=0, extra_body={"ignore_eos": True})
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    pieces, usage = [], None
    for chunk in client.completions.create(
            model="tiny", prompt="kane tori", max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        pieces.extend(c.text for c in chunk.choices)
        usage = chunk.usage or usage
    assert "".join(pieces) == whole.choices[0].text
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens


def test_chat_streaming_with_vllm_extensions(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "suven mola"}]
    stream = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=6, stream=True, temperature=0.8,  # type: ignore[arg-type]
        seed=1, extra_body={"top_k": 20, "min_tokens": 6})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    again = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=6, temperature=0.8, seed=1,  # type: ignore[arg-type]
        extra_body={"top_k": 20, "min_tokens": 6})
    assert again.choices[0].message.content == streamed


def test_models_health_and_the_api_key(server: str, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert httpx.get(f"{server}/health").status_code == 200
    refused = httpx.get(f"{server}/v1/models")
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    wrong = openai.OpenAI(base_url=f"{server}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_an_oversize_prompt_and_malformed_json_get_openai_errors(
    server: str, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.BadRequestError, match="allows 512 per request"):
        client.completions.create(model="tiny", prompt=list(range(3, 503)), max_tokens=16)
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    broken = httpx.post(f"{server}/v1/completions", content=b'{"prompt": "a", "max_tok',
                        headers=headers)
    assert broken.status_code == 400
    assert "invalid request" in broken.json()["error"]["message"]
    wrong_type = httpx.post(f"{server}/v1/chat/completions", headers=headers,
                            content=json.dumps({"messages": [], "top_p": 3}))
    assert wrong_type.status_code == 400
    assert "messages" in wrong_type.json()["error"]["message"]
    assert "top_p" in wrong_type.json()["error"]["message"]


def test_a_disconnecting_client_frees_its_slot(server: str, client: openai.OpenAI) -> None:
    aborted_before = _metric(server, "request_aborted_total")
    stream = client.completions.create(model="tiny", prompt="kane", max_tokens=400,
                                       stream=True, extra_body={"ignore_eos": True})
    for count, _ in enumerate(stream):
        if count == 3:
            break
    assert _metric(server, "num_requests_running") == 1
    stream.close()
    deadline = time.monotonic() + 10
    while _metric(server, "num_requests_running") != 0:
        assert time.monotonic() < deadline, "the disconnected request kept its slot"
        time.sleep(0.05)
    assert _metric(server, "request_aborted_total") == aborted_before + 1
    assert _metric(server, "kv_cache_usage_perc") == 0.0


def test_a_client_that_gives_up_on_a_whole_response_frees_its_slot(
    served: tuple[str, LLMEngine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, engine = served
    step = engine.step

    def slow_step() -> list[RequestOutput]:
        time.sleep(STEP_DELAY_S)
        return step()

    # at least 480 steps of STEP_DELAY_S: the response cannot come within the client's
    # 0.3 s however fast the host, so it always gives up before the server has answered
    monkeypatch.setattr(engine, "step", slow_step)
    aborted_before = _metric(server, "request_aborted_total")
    body = {"prompt": "kane", "max_tokens": 480, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/completions", json=body, timeout=httpx.Timeout(5, read=0.3),
                   headers={"Authorization": f"Bearer {API_KEY}"})
    deadline = time.monotonic() + 10
    while _metric(server, "request_aborted_total") != aborted_before + 1:
        assert time.monotonic() < deadline, "the abandoned request was not aborted"
        time.sleep(0.05)
    assert _metric(server, "num_requests_running") == 0
