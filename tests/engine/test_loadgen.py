"""The load generator: arrivals, vLLM's metric keys, and a run against the real server."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from swarmfab.engine.loadgen import (
    LoadSpec,
    RequestRecord,
    arrival_gaps,
    random_prompts,
    random_requests,
    read_prompts,
    run_load,
    summarise,
)
from swarmfab.engine.tokenizer import Detokenizer, Tokenizer


def test_gamma_arrivals_last_count_over_rate_and_inf_sends_at_once() -> None:
    gaps = arrival_gaps(50, rate=10.0, burstiness=0.5, seed=1)
    assert math.isclose(sum(gaps), 5.0) and min(gaps) >= 0
    assert arrival_gaps(50, 10.0, 0.5, seed=1) == gaps
    assert arrival_gaps(4, math.inf, 1.0, seed=1) == [0.0] * 4


def test_lengths_spread_by_the_range_ratio_and_not_without_one() -> None:
    fixed = random_requests(20, 64, 32, 0.0, vocab=500, seed=4)
    assert fixed == [(p, 32) for p in random_prompts(20, 64, 500, 4)]  # as before it
    spread = random_requests(400, 64, 32, 0.5, vocab=500, seed=4)
    prompts, outputs = [len(p) for p, _ in spread], [n for _, n in spread]
    assert min(prompts) == 32 and max(prompts) == 96       # [L/2, 3L/2], ends included
    assert min(outputs) == 16 and max(outputs) == 48
    assert 56 < sum(prompts) / 400 < 72 and random_requests(400, 64, 32, 0.5, 500, 4) == spread
    assert min(n for _, n in random_requests(50, 3, 2, 0.9, 500, 1)) == 2  # a TPOT each
    with pytest.raises(ValueError, match="range_ratio"):
        random_requests(1, 8, 8, 1.0, 500, 0)


def test_a_prompts_file_is_read_as_json_lines_or_an_array(tmp_path: Path) -> None:
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "hello there", "output_len": 5}\n\n{"prompt": [5, 6, 7]}\n')
    assert read_prompts(lines, 9) == [("hello there", 5), ([5, 6, 7], 9)]
    array = tmp_path / "p.json"
    array.write_text(' [{"prompt": "a"}]')
    assert read_prompts(array, 4) == [("a", 4)]
    for text, message in (("", "no prompts"), ("[]", "no prompts"), ("{oops", "JSON lines"),
                          ('{"text": "a"}', "entry 0: expected"),
                          ('{"prompt": "a"}\n{"prompt": [1, -2]}', "entry 1: expected"),
                          ('{"prompt": [true]}', "entry 0: expected"),
                          ('{"prompt": "a", "output_len": 1}', "entry 0: output_len")):
        lines.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_prompts(lines, 8)
    with pytest.raises(ValueError, match="cannot be read"):
        read_prompts(tmp_path / "missing.jsonl", 8)


def test_summary_follows_vllm_definitions() -> None:
    fast = RequestRecord(prompt_len=4, success=True, output_tokens=3, ttft=0.1,
                         latency=0.3, itl=[0.1, 0.1])
    slow = RequestRecord(prompt_len=4, success=True, output_tokens=3, ttft=0.5,
                         latency=1.5, itl=[0.5, 0.5])
    failed = RequestRecord(prompt_len=4, error="boom")
    result = summarise([fast, slow, failed], duration=2.0, percentiles=(50, 99),
                       goodput={"ttft": 200.0})
    assert (result["completed"], result["failed"]) == (2, 1)
    assert result["output_throughput"] == 3.0 and result["request_throughput"] == 1.0
    assert result["request_goodput"] == 0.5       # only `fast` meets ttft <= 200 ms
    assert math.isclose(result["mean_tpot_ms"], (100 + 500) / 2)   # (e2el - ttft) / 2
    assert math.isclose(result["median_ttft_ms"], 300.0)
    assert {"p50_itl_ms", "p99_e2el_ms", "std_tpot_ms", "total_token_throughput"} <= set(result)


def test_a_run_against_the_server(server: str) -> None:
    spec = LoadSpec(base_url=server, num_prompts=6, input_len=12, output_len=5,
                    max_concurrency=2, request_rate=50.0, num_warmups=1, seed=3,
                    api_key="test-key-123")
    result = asyncio.run(run_load(spec))
    assert result["completed"] == 6 and result["failed"] == 0
    assert result["input_lens"] == [12] * 6 and result["output_lens"] == [5] * 6
    assert result["median_ttft_ms"] > 0 and result["median_tpot_ms"] > 0
    spread = asyncio.run(run_load(LoadSpec(
        base_url=server, num_prompts=6, input_len=12, output_len=6, range_ratio=0.5,
        max_concurrency=2, num_warmups=0, seed=3, api_key="test-key-123")))
    # each request sent the prompt and streamed exactly the output length it drew
    drawn = [(len(p), n) for p, n in random_requests(6, 12, 6, 0.5, 512, 3)]
    assert list(zip(spread["input_lens"], spread["output_lens"], strict=True)) == drawn
    assert len(set(drawn)) > 1
    # a prompts file: every entry once before any repeats, its text's tokens counted by
    # the server, each with its own output length
    dataset = (("hello world", 3), ("the snow man", 4), ([7, 8, 9, 10], 2))
    served = asyncio.run(run_load(LoadSpec(
        base_url=server, num_prompts=6, dataset=dataset, max_concurrency=3,
        num_warmups=0, seed=1, api_key="test-key-123")))
    assert served["completed"] == 6 and sorted(served["output_lens"]) == [2, 2, 3, 3, 4, 4]
    assert 4 in served["input_lens"] and all(n > 0 for n in served["input_lens"])


@pytest.mark.parametrize("text", ["kane ☃ wörld", "日本語"])
def test_streamed_text_never_splits_a_character(tiny_model: Path, text: str) -> None:
    tokenizer = Tokenizer(tiny_model)
    detokenizer = Detokenizer(tokenizer)
    pieces = [detokenizer.add(token) for token in tokenizer.encode(text)]
    assert not any("\ufffd" in piece for piece in pieces)
    assert "".join(pieces) == text
