"""The Goal: what the user wants optimised, validated before anything runs.

A goal comes from a TOML file or from a workload's built-in default. Every field is
checked by pydantic; any mistake becomes one :class:`GoalError` that names the field, what
was given and what is allowed, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swarmfab.errors import GoalError, WorkloadError
from swarmfab.workloads import AnyShape, Shape, get_workload

__all__ = [
    "LLM_ROLES",
    "Goal",
    "LLMRole",
    "LLMSettings",
    "ShapeSpec",
    "Tolerance",
    "default_goal",
    "describe_errors",
    "load_goal",
    "parse_duration",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str | float | int) -> float:
    """Turn ``"60s"``, ``"10m"``, ``"1.5h"`` or a number of seconds into seconds."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a duration; write e.g. '90s', '10m' or '1h'")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShapeSpec(_Strict):
    """One target shape. ``HV`` defaults to ``H`` (no grouped value heads). ``pool`` N:
    the call updates states in place in a pool of N states, as a serving engine decodes
    (the sequences' slots are shuffled; implies ``initial_state``). ``lengths``: packed
    sequences of these lengths in one call, as an engine prefills many requests (fla's
    ``cu_seqlens``; B = 1, T their sum, both filled in when left out)."""

    B: Annotated[int, Field(ge=1, le=4096)] = 1
    T: Annotated[int | None, Field(ge=1, le=1_048_576)] = None
    H: Annotated[int, Field(ge=1, le=1024)]
    K: Annotated[int, Field(ge=1, le=1024)]
    V: Annotated[int, Field(ge=1, le=1024)]
    HV: Annotated[int | None, Field(ge=1, le=4096)] = None
    initial_state: bool = False
    pool: Annotated[int | None, Field(ge=1, le=65_536)] = None
    lengths: list[Annotated[int, Field(ge=1, le=1_048_576)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _packed_tokens(cls, data: Any) -> Any:
        """T of packed sequences is their lengths' sum, when not given."""
        if isinstance(data, dict) and data.get("T") is None and isinstance(
                data.get("lengths"), list) and all(isinstance(n, int) for n in data["lengths"]):
            return {**data, "T": sum(data["lengths"])}
        return data

    @model_validator(mode="after")
    def _grouped_heads_divide(self) -> ShapeSpec:
        if self.lengths is not None and (self.B != 1 or self.pool is not None
                                         or sum(self.lengths) != self.T):
            raise ValueError(f"packed lengths need B = 1, no pool and T = their sum "
                             f"({sum(self.lengths)})")
        if self.T is None:
            raise ValueError("T is required (or lengths, for packed sequences)")
        if self.HV is not None and self.HV % self.H:
            raise ValueError(f"HV ({self.HV}) must be a multiple of H ({self.H})")
        if self.pool is not None and self.pool < self.B:
            raise ValueError(f"pool ({self.pool}) must hold a state per sequence (B = {self.B})")
        return self

    def to_shape(self) -> Shape:
        assert self.T is not None  # the validator fills it in
        return Shape(
            B=self.B, T=self.T, H=self.H, HV=self.HV or self.H, K=self.K, V=self.V,
            initial_state=self.initial_state or self.pool is not None, pool=self.pool or 0,
            lengths=tuple(self.lengths or ()),
        )


class Tolerance(_Strict):
    """Acceptance thresholds; ``None`` keeps the workload's default for the dtype."""

    rms_ratio: Annotated[float | None, Field(gt=0, lt=1)] = None
    max_abs: Annotated[float | None, Field(gt=0)] = None


LLMRole = Literal["memory-layout", "tiling", "vectorisation", "algorithm", "fusion", "parallelism"]
LLM_ROLES: tuple[str, ...] = get_args(LLMRole)


class LLMSettings(_Strict):
    """Where LLM agents get their model, and how much they may spend.

    The API key itself is never part of a goal (goals are stored with every run): only
    the name of the environment variable that holds it.
    """

    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None  # None: the provider's public endpoint
    model: str | None = None
    api_key_env: str | None = None  # None: OPENAI_API_KEY or ANTHROPIC_API_KEY
    roles: Annotated[list[LLMRole], Field(min_length=1)] = [
        "vectorisation", "algorithm", "memory-layout"]
    # USD the agents may spend; None: DEFAULT_BUDGET_USD where the price is known. A
    # budget given for a model whose price is not known (nor given below) is refused when
    # the agents are built: it could not be enforced
    budget_usd: Annotated[float | None, Field(ge=0)] = None
    budget_tokens: Annotated[int | None, Field(ge=1)] = None  # input and output together
    # USD per million tokens; None: the built-in price of well-known models, else unknown
    price_input: Annotated[float | None, Field(ge=0)] = None
    price_output: Annotated[float | None, Field(ge=0)] = None
    timeout_s: Annotated[float, Field(alias="timeout", gt=0)] = 120.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 3
    stream: bool = False
    repair_turns: Annotated[int, Field(ge=0, le=10)] = 2
    context_tokens: Annotated[int, Field(ge=1000, le=1_000_000)] = 16_000
    max_output_tokens: Annotated[int, Field(ge=256, le=200_000)] = 8_192
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.7
    review: bool = True  # a reviewer reads every LLM-authored champion's diff

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. "
                             "http://127.0.0.1:8000/v1")
        return url

    @model_validator(mode="after")
    def _both_prices(self) -> LLMSettings:
        if (self.price_input is None) != (self.price_output is None):
            raise ValueError("give both prices, price_input and price_output (USD per "
                             "million tokens; --llm-price-input and --llm-price-output)")
        return self

    def key_variable(self) -> str:
        """The environment variable the API key is read from."""
        default = "ANTHROPIC_API_KEY" if self.provider == "anthropic" else "OPENAI_API_KEY"
        return self.api_key_env or default


class Goal(_Strict):
    """A validated optimisation goal."""

    workload: str
    # None: the workload's own default shapes; an explicit list must not be empty
    shapes: Annotated[list[ShapeSpec] | None, Field(min_length=1, max_length=32)] = None
    # a problem file's target sizes by name ([[sizes]] batch_size = 64 ...); names left
    # out keep the file's value
    sizes: Annotated[list[dict[str, Annotated[int, Field(ge=1)]]] | None,
                     Field(min_length=1, max_length=32)] = None
    device: Literal["cpu", "cuda"] = "cpu"  # cuda: the GPU design space and baselines
    # what q, k, v and beta are given in (the state stays float32); the verifier's
    # default tolerances follow it (docs/verification.md)
    dtype: Literal["float32", "bfloat16"] = "float32"
    metric: Literal["latency"] = "latency"
    agents: Annotated[list[Literal["builtin", "llm"]], Field(min_length=1)] = ["builtin"]
    llm: LLMSettings = LLMSettings()
    # baselines to time (default: the workload's standard ones; "torch-compile" is opt-in)
    baselines: Annotated[list[str] | None, Field(min_length=1)] = None
    budget_s: Annotated[float, Field(alias="budget")] = 60.0
    max_evaluations: Annotated[int | None, Field(ge=1)] = None
    threads: Annotated[int, Field(ge=1, le=1024)] = Field(
        default_factory=lambda: len(os.sched_getaffinity(0))
    )
    # evaluations in flight at once; None: as many benchmarks as fit side by side
    workers: Annotated[int | None, Field(ge=1, le=256)] = None
    seed: Annotated[int, Field(ge=0)] = 0
    eval_timeout_s: Annotated[float, Field(alias="eval_timeout", gt=0)] = 120.0
    tolerance: Tolerance = Tolerance()
    # untrusted code (an LLM's or a user's candidate) may run where the sandbox holds only
    # in part (`swarmfab doctor` says what holds here); each verdict records what held
    allow_weak_sandbox: bool = False

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("workload")
    @classmethod
    def _known_workload(cls, name: str) -> str:
        try:
            get_workload(name)
        except WorkloadError as exc:  # pydantic reports ValueErrors against the field
            raise ValueError(str(exc)) from exc
        return name

    @model_validator(mode="after")
    def _known_baselines(self) -> Goal:
        known = get_workload(self.workload).baselines()
        unknown = [name for name in self.baselines or () if name not in known]
        if unknown:
            raise ValueError(f"unknown baseline(s) {', '.join(unknown)}; "
                             f"{self.workload} has {', '.join(known)}")
        return self

    @model_validator(mode="after")
    def _dtype_is_the_workloads(self) -> Goal:
        dtypes = get_workload(self.workload).dtypes
        if self.dtype not in dtypes:
            raise ValueError(f"dtype {self.dtype!r}: {self.workload} takes its inputs in "
                             f"{' or '.join(dtypes)}")
        return self

    @model_validator(mode="after")
    def _llm_has_a_model(self) -> Goal:
        if "llm" in self.agents and not self.llm.model:
            raise ValueError("the llm agents need a model: set llm.model in the goal "
                             "or pass --llm-model")
        return self

    @model_validator(mode="after")
    def _sizes_are_the_workloads(self) -> Goal:
        if self.sizes is None:
            return self
        if self.shapes is not None:
            raise ValueError("give [[shapes]] or [[sizes]], not both")
        workload = get_workload(self.workload)
        for sizes in self.sizes:
            try:
                workload.dims_of(sizes)
            except (ValueError, WorkloadError) as exc:
                raise ValueError(str(exc)) from exc
        return self

    @model_validator(mode="after")
    def _has_shapes(self) -> Goal:
        if self.shapes is None and not get_workload(self.workload).default_shapes:
            raise ValueError(f"no target shapes: {self.workload} has no default shapes, "
                             "list some under [[shapes]]")
        return self

    @field_validator("budget_s", "eval_timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    def target_shapes(self) -> list[AnyShape]:
        """The goal's shapes, or the workload's own default shapes when it names none."""
        if self.shapes:
            return [spec.to_shape() for spec in self.shapes]
        if self.sizes:
            workload = get_workload(self.workload)
            return [workload.dims_of(sizes) for sizes in self.sizes]
        return list(get_workload(self.workload).default_shapes)

    def with_overrides(self, **changes: Any) -> Goal:
        """A copy with some fields replaced, validated like a file would be."""
        return _validate(_merged(self.model_dump(by_alias=True), changes),
                         source="command line")


def _merged(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the given (not None) values; a sub-table is merged key by key."""
    data = dict(data)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):  # a sub-table
            data[key] = {**data[key], **{k: v for k, v in value.items() if v is not None}}
        elif isinstance(value, dict):
            data[key] = {k: v for k, v in value.items() if v is not None}
        elif value is not None:
            data[key] = value
    return data


def _validate(data: dict[str, Any], source: str) -> Goal:
    try:
        return Goal.model_validate(data)
    except ValidationError as exc:
        raise GoalError(describe_errors(exc, source)) from exc


def describe_errors(exc: ValidationError, source: str, root: type[BaseModel] | None = None,
                    kind: str = "goal") -> str:
    """A validation error as one message: each field, what was given, and for an unknown
    key the closest allowed one (``root``: the model validated, a kernel Goal by default)."""
    root = root or Goal
    lines = [f"invalid {kind} ({source}):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        given = error.get("input")
        shown = "" if isinstance(given, dict) else f" (got {given!r})"
        if error["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key{shown}{_allowed_keys(error['loc'], root)}")
        else:
            lines.append(f"  {where}: {error['msg']}{shown}")
    return "\n".join(lines)


def _allowed_keys(loc: tuple[int | str, ...], root: type[BaseModel]) -> str:
    """For an unknown key: the closest allowed one and every key allowed where it stands."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:  # down the nested tables to the one holding the key
        if model is None:
            break
        if isinstance(part, str):
            field = next((f for name, f in model.model_fields.items()
                          if part in (name, f.alias)), None)
            model = _model_in(field.annotation) if field is not None else None
    if model is None:
        return ""
    allowed = [field.alias or name for name, field in model.model_fields.items()]
    table = {root: "a goal", ShapeSpec: "a shape"}.get(
        model, f"[{'.'.join(str(p) for p in loc[:-1] if isinstance(p, str))}]")
    by_lower = {key.lower(): key for key in allowed}  # HV for Hv
    close = difflib.get_close_matches(str(loc[-1]).lower(), list(by_lower), n=1)
    hint = f"; did you mean {by_lower[close[0]]!r}?" if close else "."
    return f"{hint} Allowed keys of {table}: {', '.join(allowed)}"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field's type (``list[ShapeSpec] | None`` -> ShapeSpec)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


def load_goal(path: Path, workload: str | None = None, **changes: Any) -> Goal:
    """Read and validate a TOML goal file; ``workload`` (a suite's problem) replaces the
    file's own, which it may then leave out; ``changes`` as in :meth:`Goal.with_overrides`,
    applied before the file is validated."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise GoalError(f"goal file {path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GoalError(f"goal file {path} is not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise GoalError(f"goal file {path} cannot be read: {exc}") from exc
    if workload is not None:
        data["workload"] = workload
    return _validate(_merged(data, changes), source=str(path))


def default_goal(workload: str) -> Goal:
    """The built-in goal of a workload: its own default target shapes on this CPU."""
    return _validate({"workload": workload}, source=f"default goal of {workload}")


def parse_shape(text: str) -> Shape:
    """A shape as the command line writes it: ``B,T,H,K,V[,HV][+h0|+poolN]``."""
    sizes, _, suffix = text.partition("+")
    try:
        numbers = [int(part) for part in sizes.split(",")]
        b, t, h, k, v, *rest = numbers
        if suffix not in ("", "h0") and not suffix.startswith("pool"):
            raise ValueError(suffix)
        pool = int(suffix.removeprefix("pool")) if suffix.startswith("pool") else None
        return ShapeSpec(B=b, T=t, H=h, K=k, V=v, HV=rest[0] if rest else None,
                         initial_state=suffix == "h0", pool=pool).to_shape()
    except (ValueError, TypeError) as exc:
        raise GoalError(f"--shape {text!r}: expected B,T,H,K,V[,HV][+h0|+poolN] as positive "
                        "integers (+h0: start from an initial state; +poolN: update states "
                        "in place in a pool of N, as an engine decodes)") from exc
