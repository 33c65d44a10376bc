"""Providers against a real HTTP server on loopback that speaks the providers' protocols."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Hang, Raw, Reply, Status

from swarmfab.agents.llm.providers import (
    AnthropicProvider,
    Message,
    OpenAIProvider,
    make_provider,
    read_api_key,
)
from swarmfab.agents.llm.spend import Pricing, Spend
from swarmfab.errors import GoalError, ProviderError
from swarmfab.goal import LLMSettings
from swarmfab.report.llm import summarise_events
from swarmfab.sandbox import job_user, scrubbed_environment

ASK = [Message("system", "be brief"), Message("user", "make it faster")]


def openai_at(llm: FakeLLM, **options: object) -> OpenAIProvider:
    settings = {"timeout_s": 5.0, "max_retries": 0, **options}
    return OpenAIProvider("fake-coder", "sk-test-key", llm.base_url, **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_comes_back_with_its_token_counts(stream: bool) -> None:
    with FakeLLM([Reply("RATIONALE: x\n```c\nint f;\n```", prompt_tokens=77,
                        completion_tokens=11)]) as llm:
        done = openai_at(llm, stream=stream).complete(ASK, 512, 0.2)
    assert done.text == "RATIONALE: x\n```c\nint f;\n```"
    assert (done.input_tokens, done.output_tokens, done.estimated) == (77, 11, False)
    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test-key"
    assert request.body["model"] == "fake-coder"
    assert request.body["messages"] == [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "make it faster"}]
    assert request.body.get("stream", False) is stream


@pytest.mark.parametrize("stream", [False, True])
def test_without_usage_the_counts_are_estimated_and_say_so(stream: bool) -> None:
    with FakeLLM([Reply("x" * 400, usage=False)]) as llm:
        done = openai_at(llm, stream=stream).complete(ASK, 512, 0.2)
    assert done.estimated
    assert done.output_tokens == 100  # about four characters a token


def test_a_rate_limit_is_retried_with_backoff() -> None:
    with FakeLLM([Status(429, headers={"retry-after": "0.2"}), Reply("ok")]) as llm:
        done = openai_at(llm, max_retries=2).complete(ASK, 512, 0.2)
    assert done.text == "ok"
    assert len(llm.requests) == 2


def test_server_errors_end_as_one_provider_error_after_the_retries() -> None:
    with FakeLLM(default=Status(500)) as llm, pytest.raises(ProviderError) as caught:
        openai_at(llm, max_retries=1).complete(ASK, 512, 0.2)
    assert caught.value.kind == "http-500"
    assert len(llm.requests) == 2  # the first try and one retry


def test_a_rate_limit_that_persists_is_named() -> None:
    with FakeLLM(default=Status(429, headers={"retry-after": "0"})) as llm, \
            pytest.raises(ProviderError) as caught:
        openai_at(llm, max_retries=0).complete(ASK, 512, 0.2)
    assert caught.value.kind == "rate-limited"


def test_a_hanging_server_times_out() -> None:
    with FakeLLM([Hang(30)]) as llm:
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            openai_at(llm, timeout_s=1.0).complete(ASK, 512, 0.2)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_call_gives_up_when_the_run_needs_it_to(kind: str) -> None:
    """A run near the end of its budget bounds the call, retries included."""
    with FakeLLM([Hang(30), Hang(30), Hang(30)]) as llm:
        if kind == "openai":
            provider: OpenAIProvider | AnthropicProvider = openai_at(
                llm, timeout_s=20.0, max_retries=2)
        else:
            provider = AnthropicProvider("fake-claude", "sk-ant", llm.base_url, 20.0, 2)
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            provider.complete(ASK, 512, 0.2, timeout_s=1.0)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 10  # not 3 tries of 20 s


@pytest.mark.parametrize("body", ["{not json", '{"id": "x", "choices": []}', "[]"])
def test_malformed_replies_are_provider_errors(body: str) -> None:
    with FakeLLM([Raw(body)]) as llm, pytest.raises(ProviderError):
        openai_at(llm).complete(ASK, 512, 0.2)


def test_an_empty_reply_is_an_empty_text_not_an_error() -> None:
    with FakeLLM([Reply("")]) as llm:
        assert openai_at(llm).complete(ASK, 512, 0.2).text == ""


def test_anthropic_messages_protocol() -> None:
    with FakeLLM([Reply("VERDICT: CLEAN", prompt_tokens=50, completion_tokens=5)]) as llm:
        provider = AnthropicProvider("claude-test", "ak-test", llm.base_url.removesuffix("/v1"),
                                     timeout_s=5.0, max_retries=0)
        done = provider.complete(ASK, 256, 0.0)
    assert (done.text, done.input_tokens, done.output_tokens) == ("VERDICT: CLEAN", 50, 5)
    request = llm.requests[0]
    assert request.path == "/v1/messages"
    sent = request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    assert "ak-test" in sent  # the key header depends on the SDK version
    assert request.body["system"] == "be brief"
    assert request.body["messages"] == [{"role": "user", "content": "make it faster"}]


def test_a_key_variable_the_sandbox_would_not_scrub_leaves_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_LLM_ACCESS", "plain-name-secret")
    settings = LLMSettings(model="m", api_key_env="MY_LLM_ACCESS")
    assert read_api_key(settings) == "plain-name-secret"
    assert "MY_LLM_ACCESS" not in os.environ
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scrubbed-anyway")
    assert read_api_key(LLMSettings(model="m")) == "sk-scrubbed-anyway"


def test_the_public_endpoint_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(GoalError, match="set OPENAI_API_KEY"):
        make_provider(LLMSettings(model="gpt-4o"))
    local = make_provider(LLMSettings(model="qwen", base_url="http://127.0.0.1:9/v1"))
    assert isinstance(local, OpenAIProvider)  # a local server needs no key


def test_cost_is_known_only_where_the_price_is() -> None:
    assert Pricing.of(LLMSettings(model="gpt-4o-mini")).known
    assert Pricing.of(LLMSettings(model="gpt-4o-mini", base_url="http://h/v1")).known is False
    own = Pricing.of(LLMSettings(model="local", price_input=1.0, price_output=3.0))
    assert own.cost(1_000_000, 1_000_000) == pytest.approx(4.0)
    unknown = Spend(Pricing(None, None), budget_usd=0.0, budget_tokens=1000)
    assert unknown.exhausted() is None  # an unknown price never claims the dollar budget
    events = [("llm-call", json.dumps({"input_tokens": 10, "output_tokens": 2,
                                       "cost_usd": None}))]
    assert summarise_events(events)["cost_usd"] is None  # type: ignore[index]


KEY_PROBE = """
import os, pathlib, sys
from swarmfab.goal import LLMSettings
from swarmfab.sandbox import job_user, scrubbed_environment
from swarmfab.agents.llm.providers import read_api_key
from swarmfab.sandbox import run_job
if __name__ == "__main__":
    if sys.argv[1] == "read":  # what swarmfab run does before any job starts
        assert read_api_key(LLMSettings(model="m", api_key_env="MY_LLM_ACCESS")) == "s3cr3t-value"
    seen = run_job(os.getenv, "MY_LLM_ACCESS").value
    # a job dropped to nobody may not read its own environ block (a process that changed
    # its user is not dumpable): then it cannot find the key there either
    read = run_job(pathlib.Path.read_bytes, pathlib.Path("/proc/self/environ"))
    print("getenv", seen)
    print("environ", read.value is not None and b"s3cr3t-value" in read.value)
    print("read", read.status.value, read.detail)
"""


def test_a_key_read_by_the_llm_agents_never_reaches_a_candidate_job(tmp_path: Path) -> None:
    """The key's variable has a name the sandbox's scrub does not recognise (the control
    below); once the provider has read it, no job sees it, not even in /proc/self/environ."""
    assert scrubbed_environment({"MY_LLM_ACCESS": "x"}) == {"MY_LLM_ACCESS": "x"}
    probe = tmp_path / "probe.py"
    probe.write_text(KEY_PROBE)
    env = {**os.environ, "MY_LLM_ACCESS": "s3cr3t-value"}
    done = subprocess.run([sys.executable, str(probe), "read"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "getenv None" in done.stdout and "environ False" in done.stdout
    if job_user(isolate=True) == getpass.getuser():  # not dropped: the block was read
        assert "read ok" in done.stdout, done.stdout
