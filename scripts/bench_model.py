"""A KDA champion's worth inside the model people load (``make bench-model``).

A Kimi Linear model made here with transformers (random weights; heads of K = V = 128 as
every Kimi Linear head has, the rest scaled to fit 2 cores), timed side by side in one
process with and without the champion swapped into its KDA layers
(``package.patch_transformers()``), rounds alternating so a slow spell on a shared host
touches both:

- prefill: one forward of B = 1 and T tokens (``--prefill``), seconds per call;
- decode: ``generate`` of ``--decode-tokens`` greedy tokens from a 16-token prompt at
  batch b (``--decode-batch``), output tokens per second.

For each: medians with 95% CIs, the speedup (a paired ratio with its CI), and the share of
the time spent in the KDA calls before and after (the calls timed from outside, an Amdahl
table: what the rest of the model leaves to gain); and the logits' agreement with the
unpatched model. The champion is an exported package (``--champion DIR``, as ``swarmfab
export`` writes it) or, by default, the design space's per-token recurrence at its
default knobs, compiled here. The engine's own figures are ``make bench-engine``'s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from swarmfab.measure.stats import median_ci, paired_ratio

CONFIG: dict[str, Any] = {  # Kimi Linear's layout, scaled: 4 layers, 3 of them KDA
    "vocab_size": 2048, "hidden_size": 512, "intermediate_size": 1024,
    "moe_intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "kv_lora_rank": 128, "qk_rope_head_dim": 0,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "num_experts": 4, "num_experts_per_tok": 2,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 128,
                           "num_heads": 4, "short_conv_kernel_size": 4},
}
KDA_CALLS = ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention")


def _default_champion(directory: Path) -> Path:
    """The per-token recurrence at its default knobs, as an exported package would hold it."""
    from swarmfab.report.export import write_package
    from swarmfab.workloads import design_space

    class Run:
        workload, id = "kda", "bench-model"

    space = design_space("kda")
    champion = space.instantiate({**space.default(), "algorithm": "recurrent"},
                                 threads=torch.get_num_threads())
    write_package(directory / "kda_champion", Run(), champion)
    return directory


def _kda_timer(module: Any, spent: list[float]) -> Callable[[], None]:
    """Time every KDA call of the model from outside (whichever implementation runs);
    returns the function that removes the timers."""
    originals = {name: getattr(module, name) for name in KDA_CALLS}

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - began)
        return call

    for name, function in originals.items():
        setattr(module, name, timed(function))
    return lambda: [setattr(module, name, f) for name, f in originals.items()]  # type: ignore[func-returns-value]


def _rounds(run: Callable[[], float], patch: Callable[[], None], unpatch: Callable[[], None],
            repeats: int) -> tuple[list[float], list[float]]:
    """``repeats`` alternating pairs (the order flips every round): without, with."""
    without: list[float] = []
    with_champion: list[float] = []
    run()  # warm both paths once
    patch()
    run()
    unpatch()
    for round_ in range(repeats):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for patched in order:
            if patched:
                patch()
            (with_champion if patched else without).append(run())
            if patched:
                unpatch()
    return without, with_champion


def _share(run: Callable[[], float], module: Any, patch: Callable[[], None] | None
           ) -> float:
    """The share of one run's time spent in its KDA calls."""
    spent: list[float] = []
    if patch is not None:
        patch()
    remove = _kda_timer(module, spent)  # outside the patch: it times the champion's calls
    try:
        total = run()
    finally:
        remove()
    return sum(spent) / total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--champion", type=Path, help="an exported package's directory")
    parser.add_argument("--prefill", default="1024,4096", help="prompt lengths, B = 1")
    parser.add_argument("--decode-batch", default="1,16", help="batch sizes for decode")
    parser.add_argument("--decode-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.kimi_linear import modeling_kimi_linear as hf

    scratch = tempfile.TemporaryDirectory()
    root = args.champion.resolve() if args.champion else _default_champion(Path(scratch.name))
    sys.path.insert(0, str(root))
    package_name = next(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    champion = importlib.import_module(package_name)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("kimi_linear", **CONFIG))
    model = model.eval()
    patch, unpatch = (lambda: champion.patch_transformers()), champion.unpatch
    generator = torch.Generator().manual_seed(1)
    rows: list[dict[str, Any]] = []

    for tokens in (int(t) for t in args.prefill.split(",")):
        ids = torch.randint(3, CONFIG["vocab_size"], (1, tokens), generator=generator)

        def prefill(ids: torch.Tensor = ids) -> float:
            with torch.no_grad():
                began = time.perf_counter()
                model(ids, use_cache=False)
                return time.perf_counter() - began

        before = dict(champion.calls)
        rows.append(_measure(f"prefill T{tokens}", prefill, patch, unpatch, args.repeats,
                             hf, lambda t, n=tokens: n / t))
        rows[-1]["champion_calls"] = {k: n - before[k] for k, n in champion.calls.items()}
    for batch in (int(b) for b in args.decode_batch.split(",")):
        prompt = torch.randint(3, CONFIG["vocab_size"], (batch, 16), generator=generator)

        def decode(prompt: torch.Tensor = prompt) -> float:
            with torch.no_grad():
                began = time.perf_counter()
                model.generate(prompt, max_new_tokens=args.decode_tokens,
                               min_new_tokens=args.decode_tokens, do_sample=False)
                return time.perf_counter() - began

        before = dict(champion.calls)
        rows.append(_measure(f"decode B{batch} x{args.decode_tokens}", decode, patch, unpatch,
                             args.repeats, hf,
                             lambda t, b=batch: b * args.decode_tokens / t))
        rows[-1]["champion_calls"] = {k: n - before[k] for k, n in champion.calls.items()}
    ids = torch.randint(3, CONFIG["vocab_size"], (1, 256), generator=generator)
    with torch.no_grad():
        plain = model(ids, use_cache=False).logits.double()
        patch()
        patched = model(ids, use_cache=False).logits.double()
        unpatch()
    agreement = float((patched - plain).abs().max() / plain.abs().max())
    host = {"cpu": _cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "champion": str(args.champion or "the recurrence at its default knobs")}
    if args.json:
        print(json.dumps({"host": host, "rows": rows, "logits_max_abs_ratio": agreement},
                         indent=2))
        return 0
    print(f"bench-model: Kimi Linear (random weights, hidden 512, 3 KDA layers of 4 heads "
          f"K = V = 128, 4 experts) on {host['cpu']}, {host['threads']} threads, torch "
          f"{host['torch']}; champion: {host['champion']}; {args.repeats} alternating "
          "rounds")
    print(f"{'phase':<22} {'without':>16} {'with champion':>16} {'speedup [95% CI]':>24} "
          f"{'KDA share before':>17} {'after':>7}  champion's calls (its counter)")
    for row in rows:
        called = ", ".join(f"{k} {n}" for k, n in row["champion_calls"].items() if n)
        print(f"{row['phase']:<22} {row['without']:>10.1f} tok/s "
              f"{row['with']:>10.1f} tok/s "
              f"{row['speedup']:>8.2f}x [{row['low']:.2f}, {row['high']:.2f}] "
              f"{row['share_before']:>16.0%} {row['share_after']:>7.0%}  {called or 'none'}")
    print(f"logits, patched against unpatched (B1 T256): max-abs ratio {agreement:.1e}")
    scratch.cleanup()
    return 0


def _measure(phase: str, run: Callable[[], float], patch: Callable[[], None],
             unpatch: Callable[[], None], repeats: int, hf: Any,
             rate: Callable[[float], float]) -> dict[str, Any]:
    without, with_champion = _rounds(run, patch, unpatch, repeats)
    speedup = paired_ratio(without, with_champion)  # time without / time with
    before = _share(run, hf, None)
    after = _share(run, hf, patch)
    unpatch()
    unit = "tok/s"
    return {"phase": phase, "unit": unit[:5],
            "without": rate(median_ci(without).median),
            "with": rate(median_ci(with_champion).median),
            "speedup": speedup.median, "low": speedup.low, "high": speedup.high,
            "share_before": before, "share_after": after,
            "seconds_without": without, "seconds_with": with_champion}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return os.uname().machine


if __name__ == "__main__":
    raise SystemExit(main())
