"""A part's recorded call, as a problem file replays it and the assembled model maps it.

A call is described by its arguments (positional and keyword) and its result, each a
tensor, a plain value, or a tuple of tensors and ``None`` (an attention layer's
``position_embeddings=(cos, sin)``, its ``(output, None)`` result). The problem file's
``Model`` takes the call's tensors as flat inputs, makes the call with its plain values
as they were, and returns the result's tensors alone; the description is written into
the file as ``CALL``. In the model, a call of the same form (the same keywords, the same
plain values, tensors where tensors were) is flattened for the champion and its result
rebuilt; any other call (a decode step with a cache object) goes to the original part.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from swarmfab.model.profile import ArgumentSpec

__all__ = ["call_source", "describe", "flatten", "rebuild", "result_source", "slots",
           "unflatten"]

Described = Any  # "tensor", {"value": v}, {"tuple": [...]}


def describe(spec: ArgumentSpec) -> Described:
    if spec.kind == "tensor":
        return "tensor"
    if spec.kind == "value":
        return {"value": spec.value}
    if spec.kind == "tuple":
        return {"tuple": [describe(item) for item in spec.items]}
    raise ValueError(f"a {spec.type_name} is not replayable from shapes")


def slots(args: Sequence[ArgumentSpec], kwargs: dict[str, ArgumentSpec]
          ) -> list[tuple[str, ArgumentSpec]]:
    """The call's tensors in order, each with the input name the Model gives it."""
    named: list[tuple[str, ArgumentSpec]] = []
    for label, spec in [*((f"x{i}", a) for i, a in enumerate(args)), *kwargs.items()]:
        if spec.kind == "tensor":
            named.append((label, spec))
        elif spec.kind == "tuple":
            named += [(f"{label}_{j}", item) for j, item in enumerate(spec.items)
                      if item.kind == "tensor"]
    return named


def call_source(args: Sequence[ArgumentSpec], kwargs: dict[str, ArgumentSpec]) -> str:
    """The call's arguments as source, over the Model's input names."""
    def expression(label: str, spec: ArgumentSpec) -> str:
        if spec.kind == "tensor":
            return label
        if spec.kind == "value":
            return repr(spec.value)
        items = [f"{label}_{j}" if item.kind == "tensor" else repr(item.value)
                 for j, item in enumerate(spec.items)]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    parts = [expression(f"x{i}", a) for i, a in enumerate(args)]
    parts += [f"{name}={expression(name, spec)}" for name, spec in kwargs.items()]
    return ", ".join(parts)


def result_source(output: ArgumentSpec | None) -> str:
    """The expression returning the result's tensors alone (from ``result``)."""
    if output is None or output.kind == "tensor":
        return "result"
    if output.kind != "tuple":
        raise ValueError(f"returns a {output.type_name or output.kind}: not a tensor")
    kept = [f"result[{j}]" for j, item in enumerate(output.items) if item.kind == "tensor"]
    if not kept:
        raise ValueError("returns no tensor")
    return kept[0] if len(kept) == 1 else f"({', '.join(kept)})"


def _tensors(described: Described, value: Any) -> Iterator[torch.Tensor] | None:
    """The tensors of ``value`` in order if it has the described form, else None."""
    if described == "tensor":
        return iter([value]) if isinstance(value, torch.Tensor) else None
    if "value" in described:
        same = value is described["value"] or (
            not isinstance(value, torch.Tensor) and value == described["value"])
        return iter([]) if same else None
    items = described["tuple"]
    if not isinstance(value, tuple | list) or len(value) != len(items):
        return None
    found: list[torch.Tensor] = []
    for item, inner in zip(items, value, strict=True):
        tensors = _tensors(item, inner)
        if tensors is None:
            return None
        found += list(tensors)
    return iter(found)


def flatten(call: dict[str, Any], args: Sequence[Any], kwargs: dict[str, Any]
            ) -> list[torch.Tensor] | None:
    """The Model's inputs from a call the model makes, or None for a call of another
    form (other keywords, other plain values, something else where a tensor was)."""
    if len(args) != len(call["args"]) or set(kwargs) != set(call["kwargs"]):
        return None
    flat: list[torch.Tensor] = []
    pairs = [*zip(call["args"], args, strict=True),
             *((call["kwargs"][name], value) for name, value in kwargs.items())]
    for described, value in pairs:
        tensors = _tensors(described, value)
        if tensors is None:
            return None
        flat += list(tensors)
    return flat


def unflatten(call: dict[str, Any], flat: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments with ``flat`` in its tensors' places."""
    supply = iter(flat)

    def value(described: Described) -> Any:
        if described == "tensor":
            return next(supply)
        if "value" in described:
            return described["value"]
        return tuple(value(item) for item in described["tuple"])
    args = [value(described) for described in call["args"]]
    return args, {name: value(described) for name, described in call["kwargs"].items()}


def rebuild(output: Described, result: Any) -> Any:
    """The original part's result from the Model's tensors alone."""
    if output == "tensor" or output is None:
        return result
    supply = iter(result if isinstance(result, tuple | list) else (result,))
    return tuple(next(supply) if item == "tensor" else item["value"]
                 for item in output["tuple"])
