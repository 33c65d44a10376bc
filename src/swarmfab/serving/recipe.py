"""Engine settings: the design space the swarm searches, and the recipe a setting becomes.

A recipe is the whole of an engine's configuration as one JSON file (``recipe.json``):
scheduling, memory, kernels per slot and threads. ``swarmfab serve MODEL --recipe DIR``
serves with it; the factory's candidates are recipes, so the content hash of a recipe is
the candidate's id, and the built-in domain agents search the knobs below as they search
a kernel's.

Knobs and domains:

- scheduling: ``max_num_seqs`` (running sequences), ``max_num_batched_tokens`` (new tokens
  per step, the chunked-prefill budget: small favours inter-token latency, large favours
  time to first token and throughput), ``step_mix`` (decodes and prefill chunks in one
  step, or prefill steps of their own first);
- memory: ``block_size`` (tokens per KV block), ``kv_cache_mb`` (the KV pool),
  ``preemption`` (which sequence is recomputed when the pool runs out);
- kernels: ``kda_prefill`` and ``kda_decode``: the PyTorch references, the kernel
  factory's C kernels built for this host (``c``: the design space's chunked default for
  prefill, its recurrent form for decode; ``c-recurrent``: the recurrent form for prefill
  too), or, where the store holds one for a host like this, the kernel factory's
  champion (its setting travels in the recipe); ``moe_experts``
  (dense, looped, or by size), ``mla_decode`` (in latent space, or over expanded keys
  and values) and ``linear`` (the weight matmuls: ``F.linear``, oneDNN with packed
  weights, or whichever is clearly faster on the host, :mod:`~swarmfab.engine.linear`);
- numerics: ``dtype``, float32 or (where the CPU has AVX512-BF16 or AMX) bfloat16
  weights and activations, judged by the accuracy gate (:mod:`~swarmfab.serving.numerics`);
- threads: intra-op threads, ``auto`` being the engine's own choice by model size.

The space's starting point, measured before the domain agents search
(:class:`~swarmfab.agents.builtin.starting.StartingPointsAgent`): both KDA slots on the
kernel factory's kernels.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarmfab.engine.linear import LINEARS, onednn_available
from swarmfab.engine.scheduler import PREEMPTIONS, STEP_MIXES
from swarmfab.engine.slots import MLA_DECODE, MOE_EXPERTS
from swarmfab.errors import EngineError
from swarmfab.kernels import (
    BF16_FLAGS,
    DesignSpace,
    Knob,
    Setting,
    full_width_isa,
    host_cpu_flags,
)
from swarmfab.serving.engines.base import FORMAT, RECIPE_FILE, load_recipe

__all__ = ["RECIPE_FILE", "Recipe", "engine_space", "kda_champions", "read_recipe"]

# a KDA slot's C kernels: (slot, choice) -> the design space's algorithm. Prefill offers
# both forms: the recurrence ran the small model's prefill shapes (B1-4, T64-1024, 12
# heads of 64) 2.5-2.8x faster than the chunked form on a 2-core AMD EPYC (AVX-512), and
# the kernel factory starts its own search from it
_C_ALGORITHMS = {("prefill", "c"): "chunked", ("prefill", "c-recurrent"): "recurrent",
                 ("decode", "c"): "recurrent"}


def _c_choices(slot: str) -> tuple[str, ...]:
    """A KDA slot's C kernel choices, in the order the space offers them."""
    return tuple(choice for (where, choice) in _C_ALGORITHMS if where == slot)


def engine_space(cpus: int, flags: frozenset[str] | None = None,
                 kda: Mapping[str, Mapping[str, Any]] | None = None) -> DesignSpace:
    """The engine's knobs on a host with ``cpus`` usable CPUs and these CPU ``flags``
    (this host's by default): bfloat16 only where the CPU computes in it. ``kda`` maps a
    KDA slot ("prefill", "decode") to the kernel factory's champion setting for it
    (:func:`kda_champions`), offered as that slot's "champion" choice."""
    flags = host_cpu_flags() if flags is None else flags
    champions = {slot: dict(setting) for slot, setting in (kda or {}).items()}

    def kernels(slot: str) -> tuple[str, ...]:
        return ("torch", *_c_choices(slot), *(("champion",) if slot in champions else ()))

    dtypes = ("float32", "bfloat16") if flags & BF16_FLAGS else ("float32",)
    linears = LINEARS if onednn_available() else ("auto", "torch")
    knobs = (
        Knob("max_num_seqs", "scheduling", (4, 8, 16, 32, 64, 128), 32, ordered=True,
             help="running sequences at most"),
        Knob("max_num_batched_tokens", "scheduling", (32, 64, 128, 256, 512, 1024, 2048),
             256, ordered=True, help="new tokens per step (the chunked-prefill budget)"),
        Knob("step_mix", "scheduling", STEP_MIXES, "mixed",
             help="whether decodes and prefill chunks share a step"),
        Knob("block_size", "memory", (8, 16, 32, 64), 16, ordered=True,
             help="tokens per KV block"),
        Knob("kv_cache_mb", "memory", (16, 32, 64, 128, 256), 64, ordered=True,
             help="memory of the attention KV pool"),
        Knob("preemption", "memory", PREEMPTIONS, "newest",
             help="which sequence gives up its memory when the KV pool runs out"),
        Knob("kda_prefill", "kernels", kernels("prefill"), "torch",
             help="KDA prefill: the PyTorch chunked reference, the factory's chunked or "
                  "recurrent C kernel, or the kernel factory's champion on this host"),
        Knob("kda_decode", "kernels", kernels("decode"), "torch",
             help="KDA decode: the PyTorch recurrence, the factory's C kernel, or the "
                  "kernel factory's champion on this host"),
        Knob("moe_experts", "kernels", tuple(MOE_EXPERTS), "auto",
             help="routed experts: dense (every expert on every token) or looped, or "
                  "auto by size"),
        Knob("mla_decode", "kernels", tuple(MLA_DECODE), "absorbed",
             help="MLA decode: scored in latent space, or with the latents expanded"),
        Knob("linear", "kernels", linears, "auto",
             help="weight matmuls: F.linear (MKL), oneDNN with packed weights, or auto "
                  "(the one clearly faster here, timed at start-up)"),
        Knob("dtype", "numerics", dtypes, "float32",
             help="weights and activations; a change is judged by the accuracy gate "
                  "(top-1 agreement, log-probability error), not by equal tokens"),
        Knob("threads", "threads", ("auto", *range(1, max(1, cpus) + 1)), "auto",
             help="intra-op threads (auto: all CPUs for big models, one fewer for small)"),
    )

    def render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
        chosen = {slot: champions[slot] for slot in ("prefill", "decode")
                  if setting.get(f"kda_{slot}") == "champion"}
        return {RECIPE_FILE: Recipe(dict(setting), chosen).to_json()}, RECIPE_FILE, ()

    # measured first: the kernel factory's kernels in both KDA slots (its champion where
    # the store holds one for this host, else the recurrent form, the kernel factory's
    # own starting point), the move that pays most where KDA is a step's largest cost
    # after the weight matmuls
    factory_kernels = {f"kda_{slot}": kernels(slot)[-1] for slot in ("prefill", "decode")}
    starting = ((factory_kernels, "the kernel factory's KDA kernels in both slots"),)
    return DesignSpace("engine", "engine", "engine-recipe", knobs, render,
                       starting=starting)


class Recipe:
    """One engine configuration (knob name -> value), and for a KDA slot set to
    "champion", the KDA design-space setting of that kernel (``kernels``: slot ->
    setting), so a recipe builds the same engine wherever it is served."""

    def __init__(self, settings: dict[str, Any],
                 kernels: Mapping[str, Mapping[str, Any]] | None = None):
        self.settings = settings
        self.kernels = {slot: dict(setting) for slot, setting in (kernels or {}).items()}

    def to_json(self) -> str:
        body: dict[str, Any] = {"format": FORMAT, "settings": self.settings}
        if self.kernels:
            body["kernels"] = self.kernels
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    def setting(self) -> dict[str, Any]:
        """Every knob: the recipe's values, the space's defaults for the rest."""
        return {**engine_space(1, frozenset()).default(), **self.settings}

    def engine_config(self) -> Any:
        from swarmfab.engine.engine import EngineConfig

        s = self.setting()
        return EngineConfig(
            max_num_seqs=int(s["max_num_seqs"]),
            max_num_batched_tokens=int(s["max_num_batched_tokens"]),
            block_size=int(s["block_size"]), kv_cache_bytes=int(s["kv_cache_mb"]) << 20,
            threads=None if s["threads"] == "auto" else int(s["threads"]),
            step_mix=str(s["step_mix"]), preemption=str(s["preemption"]),
            dtype=str(s["dtype"]))

    def kernel_slots(self, cache: Path) -> Any:
        """The engine's kernel slots: C kernels built (once, cached) where asked."""
        from swarmfab.engine.slots import KernelSlots

        setting = self.setting()
        slots = KernelSlots().choosing("moe_experts", str(setting["moe_experts"])) \
            .choosing("mla_decode", str(setting["mla_decode"])) \
            .choosing("linear", str(setting["linear"]))
        wanted = {slot: setting[f"kda_{slot}"] for slot in ("prefill", "decode")}
        for slot, choice in wanted.items():
            if choice == "torch":
                continue
            if (slot, choice) in _C_ALGORITHMS:
                algorithm = _C_ALGORITHMS[slot, choice]
                kernel, label = {"algorithm": algorithm, **_full_width()}, f"c:{algorithm}"
            elif choice == "champion" and slot in self.kernels:
                kernel, label = self.kernels[slot], "c:champion"
            elif choice == "champion":
                raise EngineError(f"kda_{slot} is 'champion' but the recipe holds no "
                                  f"kernels.{slot} setting")
            else:
                built = ", ".join(repr(c) for c in _c_choices(slot))
                raise EngineError(f"kda_{slot} must be 'torch', {built} or 'champion', not "
                                  f"{choice!r}")
            slots = slots.with_kda(_c_kernel(kernel, cache), label,
                                   prefill=slot == "prefill", decode=slot == "decode")
        return slots


def kda_champions(store: Any, host: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The kernel factory's champion setting on a host like ``host`` for each KDA slot
    (decode shapes for decode, small prefill shapes for prefill), where the store has
    one: the most similar earlier run's, as ``swarmfab run`` would recall it."""
    from swarmfab.knowledge import LessonContext
    from swarmfab.knowledge.lessons import device_class, family_of
    from swarmfab.knowledge.recall import recall_champions

    champions = store.champions(family_of("kda"))  # read once, for both slots
    found = {}
    for slot, shapes in (("prefill", ("prefill-s", "prefill-xs")), ("decode", ("decode",))):
        recalled = recall_champions(champions, LessonContext("kda", device_class(host),
                                                             shapes), limit=1)
        if recalled:
            found[slot] = dict(recalled[0].knobs)
    return found


def _full_width() -> dict[str, str]:
    """The ``isa`` knob where the compiler tunes ``native`` code narrower than the host's
    vectors (:func:`~swarmfab.kernels._host.full_width_isa`): a recurrence built so ran
    an engine-sized prefill (B4 T256, 12 heads of 64) 1.12x faster on a 2-core EPYC whose
    model its VM hides; nothing elsewhere."""
    wide = full_width_isa()
    return {"isa": wide} if wide else {}


def _c_kernel(setting: Mapping[str, Any], cache: Path) -> Any:
    """A KDA C kernel of the design space (``setting`` over its defaults: an unknown
    knob or value falls back to the default), built for this host."""
    import torch

    from swarmfab.backends import get_backend
    from swarmfab.knowledge.recall import project
    from swarmfab.workloads import design_space, get_workload

    space = design_space("kda")
    candidate = space.instantiate(project(setting, space), threads=torch.get_num_threads())
    backend = get_backend(candidate.backend)
    return backend.load(backend.build(candidate, cache), get_workload("kda"),
                        fill_outputs=False)


def read_recipe(path: Path) -> Recipe:
    """A recipe from ``recipe.json`` or a directory holding one (an exported engine run)."""
    file, data = load_recipe(path)
    if data["engine"] != "swarmfab":
        raise EngineError(f"recipe {file} is for the {data['engine']} engine, not swarmfab's: "
                          "serve it with the serve.sh that `swarmfab export` writes beside "
                          "it, or the engine's own command line")
    kernels = data.get("kernels", {})
    if not isinstance(kernels, dict) or not all(isinstance(v, dict) for v in kernels.values()):
        raise EngineError(f"recipe {file} is not a format-{FORMAT} engine recipe "
                          '({"format": 1, "settings": {...}}, optionally "kernels": '
                          '{"decode": {...}})')
    known = {knob.name for knob in engine_space(1, BF16_FLAGS).knobs}
    unknown = sorted(set(data["settings"]) - known)
    if unknown:
        raise EngineError(f"recipe {file} sets unknown knob(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    return Recipe(data["settings"], kernels)
