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


def test_completion_logprobs_and_echo_score_text_as_harnesses_do(
        client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="kane tori", max_tokens=5,
                                      temperature=0, logprobs=3,
                                      extra_body={"ignore_eos": True, "return_token_ids": True})
    choice = whole.choices[0]
    assert choice.logprobs is not None
    generated = choice.token_ids  # type: ignore[attr-defined]
    scores = choice.logprobs.token_logprobs
    assert scores is not None and len(scores) == len(generated) == 5
    tops = choice.logprobs.top_logprobs
    assert tops is not None and all(len(top) <= 3 for top in tops)
    for score, top in zip(scores, tops, strict=True):  # greedy: the chosen is the likeliest
        assert score == pytest.approx(max(top.values()), abs=1e-5) and score < 0
    offsets = choice.logprobs.text_offset
    tokens = choice.logprobs.tokens
    assert offsets is not None and tokens is not None
    assert "".join(tokens) == choice.text and offsets[0] == 0

    # the prompt and that completion scored again in one pass (echo, teacher-forced):
    # the completion's tokens get the same log-probabilities as when they were generated
    scored = client.completions.create(
        model="tiny", prompt="kane tori", max_tokens=1, temperature=0, logprobs=1, echo=True,
        extra_body={"return_tokens_as_token_ids": True})
    echoed = scored.choices[0].logprobs
    assert echoed is not None and echoed.tokens is not None and echoed.token_logprobs
    assert echoed.token_logprobs[0] is None and echoed.top_logprobs[0] is None  # type: ignore[index]
    assert all(t.startswith("token_id:") for t in echoed.tokens)
    prompt_ids = [int(t.split(":")[1]) for t in echoed.tokens[:-1]]
    rescored = client.completions.create(
        model="tiny", prompt=prompt_ids + generated, max_tokens=1, temperature=0,
        logprobs=0, echo=True)
    again = rescored.choices[0].logprobs
    assert again is not None and again.token_logprobs is not None
    assert again.token_logprobs[len(prompt_ids):-1] == pytest.approx(scores, abs=1e-4)
    assert scored.choices[0].text.startswith("kane tori")


def test_chat_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "suven mola"}]
    whole = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=4, temperature=0, logprobs=True,  # type: ignore[arg-type]
        top_logprobs=2, extra_body={"ignore_eos": True})
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 4
    assert all(len(c.top_logprobs) == 2 and c.logprob == pytest.approx(
        c.top_logprobs[0].logprob, abs=1e-5) for c in content)
    assert "".join(c.token for c in content) == whole.choices[0].message.content
    streamed = [c.choices[0].logprobs for c in client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=4, temperature=0, logprobs=True,  # type: ignore[arg-type]
        stream=True, extra_body={"ignore_eos": True}) if c.choices and c.choices[0].logprobs]
    tokens = [t for part in streamed for t in part.content or []]
    assert [t.logprob for t in tokens] == pytest.approx([c.logprob for c in content],
                                                       abs=1e-5)
    with pytest.raises(openai.BadRequestError, match="top_logprobs needs logprobs"):
        client.chat.completions.create(model="tiny", messages=messages,  # type: ignore[arg-type]
                                       top_logprobs=2)
    with pytest.raises(openai.BadRequestError, match="echo is supported without stream"):
        client.completions.create(model="tiny", prompt="a", echo=True, stream=True)


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
