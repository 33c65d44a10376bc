"""The engine goal: a model, its traffic and a latency objective, validated up front.

A TOML file with ``kind = "engine"``::

    kind = "engine"
    model = "random:small"        # a checkpoint directory, or random:tiny / random:small
    budget = "10m"
    metric = "goodput"            # or "output_throughput" (tokens/s within the objective)
                                  # or "max_rate" (the highest request rate sustained)
    engine = "swarmfab"           # or "vllm" (its own venv: scripts/vllm_env.sh)

    [traffic]
    input_len = 64
    output_len = 32
    range_ratio = 0.5             # lengths uniform in [L/2, 3L/2] (vLLM's); 0: exactly L
    # prompts_file = "prompts.jsonl"  # or your prompts: {"prompt": text or ids,
    #                                 # "output_len": N} per line, or a JSON array
    num_prompts = 32
    concurrency = 8               # a closed loop; or request_rate (+ burstiness)

    [objective]
    p99_ttft_ms = 2000
    p99_tpot_ms = 150
    attainment = 0.9              # max_rate: the share of requests that must meet both

Every mistake becomes one :class:`~swarmfab.errors.GoalError` naming the field, as for
kernel goals. ``random:SIZE`` models are made locally once (same maker as the tests) and
kept under the work directory's ``checkpoints``.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from swarmfab.engine.loadgen import Prompt, read_prompts
from swarmfab.errors import GoalError
from swarmfab.goal import describe_errors, parse_duration

__all__ = ["EngineGoal", "Objective", "Traffic", "is_engine_goal", "load_engine_goal"]

RANDOM_PREFIX = "random:"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Traffic(_Strict):
    """The requests a measurement sends: random token-id prompts, greedy, EOS ignored;
    with ``range_ratio`` r, each request's lengths drawn from [L * (1 - r), L * (1 + r)];
    with ``prompts_file``, the file's prompts and output lengths instead
    (:func:`~swarmfab.engine.loadgen.read_prompts`; ``output_len`` where an entry has
    none)."""

    input_len: Annotated[int, Field(ge=1, le=65_536)] = 32
    output_len: Annotated[int, Field(ge=2, le=65_536)] = 32
    range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prompts_file: str | None = None
    num_prompts: Annotated[int, Field(ge=2, le=100_000)] = 32
    concurrency: Annotated[int | None, Field(ge=1, le=4096)] = 8
    request_rate: Annotated[float, Field(gt=0)] = math.inf
    burstiness: Annotated[float, Field(gt=0)] = 1.0
    _dataset: tuple[tuple[Prompt, int], ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _bounded(self) -> Traffic:
        if self.concurrency is None and math.isinf(self.request_rate):
            raise ValueError("give a concurrency (closed loop) or a finite request_rate "
                             "(open loop); both unbounded would send every request at once")
        # read once, with the goal: a file that cannot serve is refused with it, and
        # every measurement of a run sends the same prompts
        if self.prompts_file is not None:
            self._dataset = tuple(read_prompts(Path(self.prompts_file), self.output_len))
        return self

    def dataset(self) -> tuple[tuple[Prompt, int], ...]:
        """The prompts file's (prompt, output length) pairs; empty for random prompts."""
        return self._dataset

    def label(self) -> str:
        arrivals = (f"c{self.concurrency}" if math.isinf(self.request_rate)
                    else f"{self.request_rate:g} req/s")
        if self.prompts_file is not None:
            return f"{arrivals} prompts:{Path(self.prompts_file).name}"
        spread = f" r{self.range_ratio:g}" if self.range_ratio else ""
        return f"{arrivals} in{self.input_len} out{self.output_len}{spread}"


class Objective(_Strict):
    """Latency a served request must meet (ms); at least one. A request counts as good
    only if it meets every limit named, was served whole and did not fail; goodput counts
    good requests per second, and ``max_rate`` the highest arrival rate at which the
    ``attainment`` share of requests is good (DistServe's definition)."""

    p99_ttft_ms: Annotated[float | None, Field(gt=0)] = None
    p99_tpot_ms: Annotated[float | None, Field(gt=0)] = None
    attainment: Annotated[float, Field(gt=0, le=1)] = 0.9

    @model_validator(mode="after")
    def _some(self) -> Objective:
        if self.p99_ttft_ms is None and self.p99_tpot_ms is None:
            raise ValueError("name p99_ttft_ms, p99_tpot_ms or both")
        return self

    def slos(self) -> dict[str, float]:
        """loadgen's goodput SLOs: metric -> ms."""
        return {name: limit for name, limit in (("ttft", self.p99_ttft_ms),
                                                ("tpot", self.p99_tpot_ms))
                if limit is not None}


class EngineGoal(_Strict):
    kind: Literal["engine"]
    model: str
    traffic: Traffic = Traffic()
    objective: Objective
    metric: Literal["goodput", "output_throughput", "max_rate"] = "goodput"
    # which engine serves: an adapter of :mod:`swarmfab.serving.engines`; an engine with
    # its own environment finds its interpreter in ``engine_python`` or the adapter's
    # variable (SWARMFAB_VLLM_PYTHON for vLLM)
    engine: str = "swarmfab"
    engine_python: str | None = None
    budget_s: Annotated[float, Field(alias="budget")] = 600.0
    max_evaluations: Annotated[int | None, Field(ge=1)] = None
    threads: Annotated[int, Field(ge=1, le=1024)] = Field(
        default_factory=lambda: len(os.sched_getaffinity(0)))
    seed: Annotated[int, Field(ge=0)] = 0
    # verification: greedy tokens of these prompts must equal the reference engine's
    verify_prompts: Annotated[int, Field(ge=1, le=256)] = 8
    verify_tokens: Annotated[int, Field(ge=1, le=1024)] = 16
    # ... or, for a recipe that changes numerics (dtype), the accuracy gate: scored
    # teacher-forced on those prompts and the reference's tokens, the candidate's most
    # likely token must be the reference's at this share of positions at least, and its
    # log-probability of the reference's token lie within this many nats of the reference's
    min_top1_agreement: Annotated[float, Field(gt=0, le=1)] = 0.95
    max_logprob_error: Annotated[float, Field(gt=0)] = 0.1
    # measurement: alternate incumbent and candidate for at least min_rounds load runs
    # each, and until the ratio's 95% interval is narrower than ci_width relative to its
    # median, or lies wholly on the slower side (or max_rounds)
    # (an even min_rounds balances which side goes first)
    min_rounds: Annotated[int, Field(ge=2, le=50)] = 4
    max_rounds: Annotated[int, Field(ge=2, le=100)] = 6
    ci_width: Annotated[float, Field(gt=0, le=1)] = 0.15
    # a crown needs the whole 95% interval of the gain above 1 + min_gain: a serving
    # measurement on a shared host drifts by more than a kernel timing does
    min_gain: Annotated[float, Field(ge=0, lt=1)] = 0.05
    startup_timeout_s: Annotated[float, Field(alias="startup_timeout", gt=0)] = 180.0
    # after the closing comparison, the default and the champion each serve one load run
    # at every offered load (concurrencies for a closed loop, request rates for an open
    # one) for the report's goodput-against-offered-load figure; the search keeps the
    # time this needs (two load runs per load)
    offered_loads: Annotated[list[Annotated[float, Field(gt=0)]],
                             Field(max_length=16)] = []

    def at_load(self, load: float) -> EngineGoal:
        """This goal with its traffic at another offered load."""
        traffic = (self.traffic.model_copy(update={"concurrency": max(1, round(load))})
                   if math.isinf(self.traffic.request_rate)
                   else self.traffic.model_copy(update={"request_rate": load}))
        return self.model_copy(update={"traffic": traffic})

    @field_validator("budget_s", "startup_timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("model")
    @classmethod
    def _model(cls, model: str) -> str:
        if model.startswith(RANDOM_PREFIX):
            from swarmfab.engine.tiny import CHECKPOINTS

            size = model[len(RANDOM_PREFIX):]
            if size not in CHECKPOINTS:
                raise ValueError(f"no random checkpoint {size!r}; choose from "
                                 f"{', '.join(RANDOM_PREFIX + s for s in sorted(CHECKPOINTS))}")
        return model

    @model_validator(mode="after")
    def _engine_serves_model(self) -> EngineGoal:
        from swarmfab.serving.engines import ENGINES

        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not "
                             f"{self.engine!r}")
        size = self.model.removeprefix(RANDOM_PREFIX) if self.model.startswith(
            RANDOM_PREFIX) else None
        if size is not None and self.engine != "fake" \
                and size.startswith("llama-") != (self.engine == "vllm"):
            raise ValueError(
                f"{self.model} is a {'Llama-style' if size.startswith('llama-') else 'Kimi Linear'}"
                f" model and the {self.engine} engine does not serve it: the swarmfab engine "
                "serves Kimi Linear (random:tiny, random:small), vLLM on CPU Llama-style "
                "models (random:llama-tiny, random:llama-small)")
        return self

    @model_validator(mode="after")
    def _rounds(self) -> EngineGoal:
        if self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds ({self.max_rounds}) is below min_rounds "
                             f"({self.min_rounds})")
        return self

    def run_label(self, parameters: int) -> str:
        """What an engine run's timings and lessons are labelled with: the model's size,
        then the traffic (e.g. ``153M c8 in64 out32``), so that lessons learnt on one
        model weigh on runs of a model of like size (``knowledge.lessons.shape_class``)."""
        for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
            if parameters >= scale:
                return f"{parameters / scale:.3g}{suffix} {self.traffic.label()}"
        return f"{parameters} {self.traffic.label()}"

    def model_dir(self, cache: Path) -> Path:
        """The checkpoint directory, made first for a ``random:`` model."""
        if not self.model.startswith(RANDOM_PREFIX):
            path = Path(self.model)
            if not (path / "config.json").is_file():
                raise GoalError(f"model {path} is not a checkpoint directory (no "
                                "config.json); give one, or random:tiny / random:small")
            return path
        from swarmfab.engine.tiny import make_checkpoint

        size = self.model[len(RANDOM_PREFIX):]
        directory = cache / f"{size}-seed{self.seed}"
        if not (directory / "tokenizer_config.json").is_file():  # written last
            make_checkpoint(directory, size, self.seed)
        return directory


def is_engine_goal(path: Path) -> bool:
    """True when a goal file says ``kind = "engine"`` (False when it cannot be read:
    the kernel goal loader then says why)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("kind") == "engine"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def load_engine_goal(path: Path, **changes: Any) -> EngineGoal:
    """Read and validate an engine goal; ``changes`` (not None) replace the file's values.
    A relative model directory or prompts file is taken relative to the goal file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise GoalError(f"goal file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GoalError(f"goal file {path} cannot be read: {exc}") from exc
    data.update({k: v for k, v in changes.items() if v is not None})
    traffic = data.get("traffic")
    if isinstance(traffic, dict) and isinstance(traffic.get("prompts_file"), str) \
            and not Path(traffic["prompts_file"]).is_absolute():
        data["traffic"] = {**traffic, "prompts_file": str(
            (path.parent / traffic["prompts_file"]).resolve())}
    model = data.get("model")
    if isinstance(model, str) and not model.startswith(RANDOM_PREFIX) \
            and not Path(model).is_absolute():
        data["model"] = str((path.parent / model).resolve())
    return validate_engine_goal(data, str(path))


def validate_engine_goal(data: dict[str, Any], source: str) -> EngineGoal:
    try:
        return EngineGoal.model_validate(data)
    except ValidationError as exc:
        raise GoalError(describe_errors(exc, source, EngineGoal, "engine goal")) from exc

