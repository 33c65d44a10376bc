"""The engine against Hugging Face ``generate`` on the same checkpoint (``make bench-engine``).

Same requests for every system: random token-id prompts of ``--input-len`` tokens,
exactly ``--output-len`` greedy output tokens each (EOS ignored), ``2 x concurrency``
requests (at least 4), closed loop with ``concurrency`` in flight.

- engine: swarmfab's engine in this process (continuous batching), timed as tokens
  arrive through its async interface, with the PyTorch references in its KDA slots; it
  steps in the main thread and the clients' event loop runs in a helper, as in
  ``swarmfab serve`` (``AsyncEngine.run_with``);
- engine+factory-kda: the same with factory kernels in the KDA slots (the design
  space's recurrent form in both, as the engine factory's starting point serves them,
  or the ``--kda-kernel`` file in both), each layer's states updated in place in its
  pool;
- engine (linear=torch), with ``--linear-torch``: the engine with its weight matmuls by
  ``F.linear``, where its default (``linear = auto``) may take oneDNN with packed weights;
- engine-http: ``swarmfab serve`` in a child process, loaded by ``swarmfab loadgen``'s
  client over HTTP with SSE streaming (the client shares the machine's cores);
- hf-generate (N threads): ``KimiLinearForCausalLM.generate`` with static batches of
  ``concurrency`` requests; per-token times from a streamer, so TTFT and TPOT are
  measured the same way (a request's clock starts when its batch starts). It runs with
  torch's default of every core and with one thread, since either can win on a small
  model; the engine is compared with the faster of the two.

The engine systems use the engine's default threads (one fewer than the cores, at least
one). The repeats alternate the systems, so a slow spell on a shared host touches all of
them. Each system runs ``--repeats`` times per concurrency; the table shows medians over
the repeats (output tokens/s with the min-max range), metrics defined as vLLM's bench
serve, and the ratio of the engine's median to the faster HF system's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from swarmfab.engine.async_engine import AsyncEngine
from swarmfab.engine.engine import EngineConfig, LLMEngine
from swarmfab.engine.loadgen import LoadSpec, RequestRecord, random_prompts, run_load, summarise
from swarmfab.engine.request import SamplingParams
from swarmfab.engine.slots import KernelSlots
from swarmfab.engine.tiny import make_checkpoint


def _engine_config(concurrency: int) -> EngineConfig:
    return EngineConfig(max_num_seqs=max(concurrency, 1), max_num_batched_tokens=256)


async def _engine_load(engine: AsyncEngine, prompts: list[list[int]], output_len: int,
                       concurrency: int) -> tuple[list[RequestRecord], float]:
    params = SamplingParams(max_tokens=output_len, temperature=0, ignore_eos=True)
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: list[int]) -> RequestRecord:
        async with gate:
            record = RequestRecord(prompt_len=len(prompt))
            start = last = time.perf_counter()
            async for output in engine.generate(prompt, params):
                now = time.perf_counter()
                if output.token_ids:
                    if record.ttft == 0.0:
                        record.ttft = now - start
                    else:
                        record.itl.append(now - last)
                    last = now
                record.output_tokens = output.completion_tokens
            record.latency = time.perf_counter() - start
            record.success = True
            return record

    start = time.perf_counter()
    records = await asyncio.gather(*(one(p) for p in prompts))
    return list(records), time.perf_counter() - start


def factory_slots(kernel: Path | None, cache: Path) -> KernelSlots:
    """KDA slots filled with compiled kernels: ``kernel`` (a C or Python candidate file) in
    both, else the design space's recurrent form in both (what an engine recipe with
    ``kda_prefill = "c-recurrent"``, ``kda_decode = "c"`` serves)."""
    if kernel is None:
        from swarmfab.serving.recipe import Recipe

        recipe = Recipe({"kda_prefill": "c-recurrent", "kda_decode": "c"})
        slots: KernelSlots = recipe.kernel_slots(cache)
        return slots
    from swarmfab.backends import get_backend
    from swarmfab.backends.files import candidate_from_file
    from swarmfab.workloads import get_workload

    candidate = candidate_from_file("kda", kernel)
    backend = get_backend(candidate.backend)
    forward = backend.load(backend.build(candidate, cache), get_workload("kda"),
                           fill_outputs=False)
    return KernelSlots().with_kda(forward, kernel.name)


def run_engine(model_dir: Path, prompts: list[list[int]], output_len: int,
               concurrency: int, slots: KernelSlots | None = None) -> dict[str, Any]:
    engine = AsyncEngine(LLMEngine.from_pretrained(model_dir, _engine_config(concurrency),
                                                   slots))

    async def load() -> tuple[list[RequestRecord], float]:
        await _engine_load(engine, prompts[:2], 4, concurrency)  # warm-up
        return await _engine_load(engine, prompts, output_len, concurrency)

    # as `swarmfab serve` runs it: the engine steps in this thread, the clients' event
    # loop runs in a helper
    records, duration = engine.run_with(load)
    return summarise(records, duration)


def run_engine_http(model_dir: Path, prompts: list[list[int]], input_len: int,
                    output_len: int, concurrency: int, seed: int) -> dict[str, Any]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "swarmfab", "serve", str(model_dir), "--port", str(port),
               "--max-num-seqs", str(concurrency), "--max-num-batched-tokens", "256"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "SWARMFAB_API_KEY": ""})
    try:
        _wait_for(f"http://127.0.0.1:{port}/health", server)
        spec = LoadSpec(base_url=f"http://127.0.0.1:{port}", num_prompts=len(prompts),
                        input_len=input_len, output_len=output_len,
                        max_concurrency=concurrency, num_warmups=2, seed=seed)
        return asyncio.run(run_load(spec))
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for(url: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"swarmfab serve exited with {server.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("swarmfab serve did not come up within 120 s")


class _Stamps:
    """A generate() streamer that only records when each step's tokens appear."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def run_hf(model: Any, prompts: list[list[int]], output_len: int,
           concurrency: int, goodput: dict[str, float] | None = None) -> dict[str, Any]:
    """vLLM-style results of HF generate; ``goodput``: SLOs (ms) as loadgen takes them."""
    def batch_run(batch: list[list[int]], new_tokens: int) -> list[RequestRecord]:
        ids = torch.tensor(batch)
        stamps = _Stamps()
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           pad_token_id=0, streamer=stamps)
        end = time.perf_counter()
        gaps = [b - a for a, b in zip(stamps.times, stamps.times[1:], strict=False)]
        return [RequestRecord(prompt_len=len(p), success=True, output_tokens=new_tokens,
                              ttft=stamps.times[0] - start, latency=end - start,
                              itl=list(gaps)) for p in batch]

    batch_run(prompts[:min(concurrency, 2)], 4)  # warm-up
    records: list[RequestRecord] = []
    start = time.perf_counter()
    for first in range(0, len(prompts), concurrency):
        records += batch_run(prompts[first:first + concurrency], output_len)
    return summarise(records, time.perf_counter() - start, (99.0,), goodput)


def _row(concurrency: int, system: str, runs: list[dict[str, Any]]) -> str:
    throughputs = [r["output_throughput"] for r in runs]
    med = {key: statistics.median(r[key] for r in runs)
           for key in ("median_ttft_ms", "median_tpot_ms", "p99_e2el_ms")}
    return (f"| {concurrency} | {system} | {statistics.median(throughputs):.1f} "
            f"({min(throughputs):.1f}-{max(throughputs):.1f}) | {med['median_ttft_ms']:.0f} "
            f"| {med['median_tpot_ms']:.1f} | {med['p99_e2el_ms']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path,
                        help="checkpoint dir (default: a random-weight one of --size)")
    parser.add_argument("--size", choices=["tiny", "small"], default="tiny",
                        help="the checkpoint to make when --model is not given: tiny (1.3M "
                             "parameters) or small (153M)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-http", action="store_true", help="skip the engine-http runs")
    parser.add_argument("--kda-kernel", type=Path,
                        help="a KDA candidate file for both KDA slots of engine+factory-kda "
                             "(default: the design space's recurrent form in both)")
    parser.add_argument("--no-factory", action="store_true",
                        help="skip the engine+factory-kda runs")
    parser.add_argument("--linear-torch", action="store_true",
                        help="also run the engine with linear = torch (F.linear), beside "
                             "its default linear = auto")
    parser.add_argument("--out", type=Path, default=Path("out/bench-engine.json"))
    args = parser.parse_args()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers import KimiLinearForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model or make_checkpoint(Path(scratch) / f"{args.size}-kimi-linear",
                                                  args.size)
        hf_model = KimiLinearForCausalLM.from_pretrained(str(model_dir)).eval()
        factory = None if args.no_factory else factory_slots(args.kda_kernel,
                                                              Path(scratch) / "kernels")
        vocab = hf_model.config.vocab_size
        results: dict[str, Any] = {"model": str(args.model or args.size),
                                   "cpus": os.cpu_count(),
                                   "input_len": args.input_len,
                                   "output_len": args.output_len, "runs": []}
        rows: list[str] = []
        ratios: list[str] = []
        for concurrency in args.concurrency:
            count = max(4, 2 * concurrency)
            prompts = random_prompts(count, args.input_len, vocab, args.seed)
            hf_threads = sorted({os.cpu_count() or 1, 1}, reverse=True)
            hf_names = [f"hf-generate ({n} thread{'s' * (n > 1)})" for n in hf_threads]
            systems: dict[str, list[dict[str, Any]]] = {
                "engine": [], "engine (linear=torch)": [], "engine+factory-kda": [],
                "engine-http": [],
                **{name: [] for name in hf_names}}
            for _ in range(args.repeats):
                systems["engine"].append(run_engine(model_dir, prompts, args.output_len,
                                                    concurrency))
                if args.linear_torch:
                    systems["engine (linear=torch)"].append(run_engine(
                        model_dir, prompts, args.output_len, concurrency,
                        KernelSlots().choosing("linear", "torch")))
                if factory is not None:
                    systems["engine+factory-kda"].append(run_engine(
                        model_dir, prompts, args.output_len, concurrency, factory))
                if not args.no_http:
                    systems["engine-http"].append(run_engine_http(
                        model_dir, prompts, args.input_len, args.output_len, concurrency,
                        args.seed))
                for name, threads in zip(hf_names, hf_threads, strict=True):
                    torch.set_num_threads(threads)
                    systems[name].append(run_hf(hf_model, prompts, args.output_len,
                                                concurrency))
            best_hf = max(statistics.median(r["output_throughput"] for r in systems[name])
                          for name in hf_names)
            for system, runs in systems.items():
                if runs:
                    rows.append(_row(concurrency, system, runs))
                    print(rows[-1], flush=True)
                    results["runs"].append({
                        "concurrency": concurrency, "system": system, "requests": count,
                        "repeats": [{k: v for k, v in r.items() if not isinstance(v, list)}
                                    for r in runs]})
            for system in ("engine", "engine (linear=torch)", "engine+factory-kda",
                           "engine-http"):
                if systems[system]:
                    ratio = statistics.median(
                        r["output_throughput"] for r in systems[system]) / best_hf
                    ratios.append(f"concurrency {concurrency}: {system} / fastest HF = "
                                  f"{ratio:.2f}x")
                    results.setdefault("ratios", []).append(
                        {"concurrency": concurrency, "system": system, "ratio": ratio})
    header = ("| concurrency | system | output tok/s, median (min-max) | median TTFT ms "
              "| median TPOT ms | p99 E2EL ms |\n|---|---|---|---|---|---|")
    print("\n" + header + "\n" + "\n".join(rows) + "\n\n" + "\n".join(ratios))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
