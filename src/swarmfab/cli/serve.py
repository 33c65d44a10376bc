"""``swarmfab serve``, ``loadgen`` and ``dashboard``: the long-running servers and their load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmfab.cli._common import (
    DEFAULT_DB,
    ENGINE_MODULES,
    DbOption,
    JsonOption,
    console,
    friendly,
    print_json,
    require_extra,
)
from swarmfab.errors import GoalError

__all__ = ["dashboard", "loadgen", "serve"]


@friendly
def dashboard(
    db: DbOption = DEFAULT_DB,
    host: Annotated[str, typer.Option(help="Address to bind; keep 127.0.0.1 unless you "
                                           "mean to share the store.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
) -> None:
    """A local web dashboard of the runs in the store, updated live while they run."""
    require_extra("report", "swarmfab dashboard", ("fastapi", "uvicorn", "matplotlib", "jinja2"))
    from swarmfab.knowledge import Store
    from swarmfab.report.dashboard import serve as serve_dashboard

    store = Store(db)
    console.print(f"dashboard on http://{host}:{port}/ (Ctrl-C stops it)", highlight=False)
    serve_dashboard(store, host, port)


@friendly
def serve(
    model_dir: Annotated[Path, typer.Argument(
        help="A Kimi Linear checkpoint directory (config.json, *.safetensors, "
             "tokenizer.json).")],
    host: Annotated[str, typer.Option(help="Address to bind; 127.0.0.1 unless you mean to "
                                           "serve other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="SWARMFAB_API_KEY",
        help="Require 'Authorization: Bearer KEY' on every endpoint but /health.")] = None,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="Running sequences at most.")] = 32,
    max_num_batched_tokens: Annotated[int, typer.Option(
        min=1, help="New tokens per step (the chunked-prefill budget).")] = 256,
    step_mix: Annotated[str, typer.Option(
        help="mixed: decodes and prefill chunks share each step; prefill-first: a waiting "
             "prompt's chunks run in steps of their own.")] = "mixed",
    preemption: Annotated[str, typer.Option(
        help="When the KV pool runs out, recompute the newest sequence (newest) or the "
             "one with the fewest tokens computed (cheapest).")] = "newest",
    dtype: Annotated[str, typer.Option(
        help="float32, or bfloat16 weights and activations (fast where the CPU has "
             "AVX512-BF16 or AMX; tokens may differ).")] = "float32",
    block_size: Annotated[int, typer.Option(min=1, help="Tokens per KV block.")] = 16,
    kv_cache_mb: Annotated[int, typer.Option(
        min=1, help="Memory for the attention KV pool.")] = 64,
    max_model_len: Annotated[int, typer.Option(
        min=1, help="Prompt + output per request.")] = 4096,
    kda_kernel: Annotated[Path | None, typer.Option(
        help="A KDA candidate file (C or Python, e.g. a champion's source), or an exported "
             "champion's directory (its operator), for both KDA slots instead of the "
             "PyTorch references.")] = None,
    threads: Annotated[int | None, typer.Option(
        min=1, help="Intra-op threads (default: every CPU for a model over 64 MiB, one "
                    "fewer for a smaller one).")] = None,
    recipe: Annotated[Path | None, typer.Option(
        help="An engine recipe (an exported engine run's directory, or its recipe.json): "
             "its settings replace the scheduling, memory, kernel and thread options.")]
        = None,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (completions, chat, SSE)."""
    require_extra("engine", "swarmfab serve", ENGINE_MODULES)
    from swarmfab.engine.async_engine import AsyncEngine
    from swarmfab.engine.engine import EngineConfig, LLMEngine
    from swarmfab.engine.server import create_app, run_server

    if not model_dir.is_dir():
        raise GoalError(f"{model_dir} is not a directory; give a checkpoint directory "
                        "(config.json, *.safetensors, tokenizer.json)")
    config = EngineConfig(max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens,
                          block_size=block_size, kv_cache_bytes=kv_cache_mb << 20,
                          max_model_len=max_model_len, threads=threads, step_mix=step_mix,
                          preemption=preemption, dtype=dtype)
    slots = _kda_slots(kda_kernel) if kda_kernel else None
    if recipe is not None:
        from dataclasses import replace

        from swarmfab.serving.recipe import read_recipe

        chosen = read_recipe(recipe)
        config = replace(chosen.engine_config(), max_model_len=max_model_len)
        slots = chosen.kernel_slots(Path(".swarmfab") / "engine-kernels")
        console.print(f"recipe {recipe}: {json.dumps(chosen.settings, sort_keys=True)}",
                      highlight=False)
    # the engine's own loading checks config.json, the weights and the tokenizer: a
    # checkpoint it cannot serve is refused here, before anything is announced
    engine = LLMEngine.from_pretrained(model_dir, config, slots)
    stepping = AsyncEngine(engine)
    app = create_app(stepping, model_dir.resolve().name, api_key)
    console.print(f"serving {model_dir} on http://{host}:{port}/v1 (Ctrl-C stops it)",
                  highlight=False)
    run_server(stepping, app, host, port)


def _kda_slots(file: Path) -> Any:
    from swarmfab.engine.slots import KernelSlots

    if file.is_dir():  # an exported champion: its operator
        return KernelSlots().with_exported(file)
    from swarmfab.backends import get_backend
    from swarmfab.backends.files import candidate_from_file
    from swarmfab.engine.slots import KernelSlots
    from swarmfab.workloads import get_workload

    candidate = candidate_from_file("kda", file)
    backend = get_backend(candidate.backend)
    artifact = backend.build(candidate, Path(".swarmfab") / "engine-kernels")
    forward = backend.load(artifact, get_workload("kda"), fill_outputs=False)
    return KernelSlots().with_kda(forward, label=f"{candidate.backend}:{file.name}")


@friendly
def loadgen(
    base_url: Annotated[str, typer.Option(help="The server's address.")] =
        "http://127.0.0.1:8000",
    num_prompts: Annotated[int, typer.Option(min=1, help="Measured requests.")] = 32,
    input_len: Annotated[int, typer.Option(min=1, help="Prompt tokens per request.")] = 32,
    output_len: Annotated[int, typer.Option(min=1, help="Output tokens per request.")] = 32,
    range_ratio: Annotated[float, typer.Option(
        help="Draw each request's lengths from [L*(1-r), L*(1+r)]; 0: exactly L.")] = 0.0,
    prompts_file: Annotated[Path | None, typer.Option(
        help="Prompts instead of random ids: JSON lines or a JSON array of "
             '{"prompt": text or ids, "output_len": N}.')] = None,
    request_rate: Annotated[float, typer.Option(
        help="Requests per second; inf sends all at once.")] = float("inf"),
    burstiness: Annotated[float, typer.Option(
        help="Gamma shape of the arrival gaps (1 = Poisson).")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(
        min=1, help="Requests in flight at most (a closed loop).")] = None,
    num_warmups: Annotated[int, typer.Option(min=0, help="Unmeasured requests first.")] = 1,
    seed: Annotated[int, typer.Option(help="Prompts and arrivals.")] = 0,
    goodput: Annotated[list[str] | None, typer.Option(
        help="SLO as metric:ms (ttft, tpot, e2el); repeatable.")] = None,
    percentile: Annotated[list[float] | None, typer.Option(
        help="Percentiles to report (default 99); repeatable.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="SWARMFAB_API_KEY")] = None,
    out: Annotated[Path | None, typer.Option(
        metavar="FILE", help="Write the results as JSON here (every request's figures "
                             "included).")] = None,
    result_file: Annotated[Path | None, typer.Option(
        "--result-file", hidden=True, help="Former spelling of --out.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Load a running server as vLLM's `bench serve` does and print its metrics (--json:
    the results on stdout, as --out FILE writes them)."""
    import asyncio

    require_extra("engine", "swarmfab loadgen", ("httpx",))
    from swarmfab.engine.loadgen import LoadSpec, read_prompts, run_load

    slos: dict[str, float] = {}
    for item in goodput or []:
        name, _, value = item.partition(":")
        try:
            milliseconds = float(value)
        except ValueError:
            milliseconds = float("nan")
        if name not in ("ttft", "tpot", "e2el") or not milliseconds > 0:
            raise GoalError(f"--goodput {item!r}: expected ttft:MS, tpot:MS or e2el:MS, "
                            "MS a positive number of milliseconds")
        slos[name] = milliseconds
    if burstiness <= 0 or request_rate <= 0:
        raise GoalError("--burstiness and --request-rate must be positive")
    try:
        dataset = tuple(read_prompts(prompts_file, output_len)) if prompts_file else ()
    except ValueError as exc:
        raise GoalError(f"--prompts-file: {exc}") from exc
    if not 0 <= range_ratio < 1:
        raise GoalError(f"--range-ratio must lie in [0, 1), got {range_ratio:g}")
    if any(not 0 < p <= 100 for p in percentile or []):
        raise GoalError("--percentile must lie in (0, 100]")
    if out is not None and result_file is not None:
        raise GoalError("--result-file is the former spelling of --out: give one of them")
    out = out or result_file
    spec = LoadSpec(base_url=base_url, num_prompts=num_prompts, input_len=input_len,
                    output_len=output_len, range_ratio=range_ratio, dataset=dataset,
                    request_rate=request_rate, burstiness=burstiness,
                    max_concurrency=max_concurrency, num_warmups=num_warmups, seed=seed,
                    api_key=api_key, percentiles=tuple(percentile or [99.0]), goodput=slos)
    try:
        result = asyncio.run(run_load(spec))
    except OSError as exc:
        raise GoalError(f"cannot reach {base_url}: {exc}") from exc
    if out:
        out.write_text(json.dumps(result, indent=2))
    if as_json:
        print_json(result)
        return
    summary = {k: v for k, v in result.items() if not isinstance(v, list)}
    for key, value in summary.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        console.print(f"{key:<28} {shown}", highlight=False)
