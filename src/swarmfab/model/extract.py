"""A part of a model as a problem file in the KernelBench convention.

The file builds the part the way the model did (its own class, constructed from the
model's config or from the instance's own attributes) inside ``Model``, whose forward
calls it on the inputs the profile recorded: their shapes are module-level sizes, so
the verifier's cases can shrink them. Random weights are enough: the verifier loads the
same weights into ``Model`` and ``ModelNew``, and the assembled model loads each
instance's own.

A class whose constructor cannot be called again from what the instance keeps (an
argument it does not store) is saved whole instead (``torch.save`` of the module: in
the file itself up to ``INLINE_BYTES``, so a sandboxed job needs nothing else, else
next to it) and loaded by ``Model``. A part is left out, with the reason, where its
calls cannot be replayed from shapes alone (a cache object, keyword arguments that
carry state).
"""

from __future__ import annotations

import base64
import inspect
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmfab.model.calls import call_source, describe, result_source, slots, unflatten
from swarmfab.model.profile import ArgumentSpec, PartProfile
from swarmfab.workloads.problem import MIN_SIZE

__all__ = ["Extraction", "extract_part", "problem_name"]

_SIMPLE = (bool, int, float, str, type(None))
INLINE_BYTES = 4 * 2**20  # a module saved whole up to this size goes into the file


@dataclass(frozen=True)
class Extraction:
    """A part's problem file, or why there is none."""

    key: str
    path: Path | None
    reason: str = ""


def problem_name(index: int, part: PartProfile) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                   part.class_name).lower()
    return f"{index:02d}_{re.sub(r'[^a-z0-9_]', '_', snake)}.py"


def extract_part(part: PartProfile, module: torch.nn.Module, config: Any,
                 directory: Path, index: int, described: str) -> Extraction:
    """Write ``part`` (whose first instance is ``module``) as a problem file in
    ``directory``; ``config`` is the model's configuration object, if it has one."""
    why = _not_replayable(part)
    if why:
        return Extraction(part.key, None, why)
    path = directory / problem_name(index, part)
    try:
        building = _constructor(module, config)
    except ValueError:  # not rebuildable from its attributes: saved whole
        building = _saved(module, path)
    call = _call(part)
    path.write_text(_source(part, building, described, _free_axes(module, part, call), call))
    return Extraction(part.key, path)


def _call(part: PartProfile) -> dict[str, Any]:
    """The part's recorded call as ``calls`` describes it (``CALL`` in the file)."""
    return {"args": [describe(spec) for spec in part.args],
            "kwargs": {name: describe(spec) for name, spec in part.kwargs.items()},
            "output": describe(part.output) if part.output is not None else "tensor"}


def _not_replayable(part: PartProfile) -> str:
    if not part.args and not part.kwargs:
        return "never called in the profiled phases"
    stateful = [name for name, spec in [*enumerate(part.args), *part.kwargs.items()]
                if spec.kind == "other"]
    if stateful:
        kinds = {spec.type_name for spec in [*part.args, *part.kwargs.values()]
                 if spec.kind == "other"}
        return (f"called with {', '.join(sorted(kinds))} ({', '.join(map(str, stateful))}): "
                "not replayable from shapes")
    if not slots(part.args, part.kwargs):
        return "called without a tensor"
    try:
        result_source(part.output)
    except ValueError as exc:
        return str(exc)
    return ""


def _constructor(module: torch.nn.Module, config: Any) -> tuple[str, str]:
    """(imports, constructor call) rebuilding ``module``."""
    cls = type(module)
    where = cls.__module__
    if where == "__main__":
        raise ValueError(f"{cls.__name__} is defined in __main__: not importable")
    arguments = []
    signature = inspect.signature(inspect.unwrap(cls.__init__))
    named = list(signature.parameters.items())[1:]
    if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for _, p in named) and named:
        raise ValueError(f"{cls.__name__}'s constructor hides its arguments (a wrapper)")
    for name, parameter in named:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name == "config" and config is not None:
            arguments.append("config=CONFIG")
            continue
        if hasattr(module, name):
            value = getattr(module, name)
            if isinstance(value, torch.Tensor | type(None)) and name == "bias":
                value = value is not None  # nn.Linear's bias=True kept as a Parameter
            if isinstance(value, torch.Size):
                value = tuple(value)
            if isinstance(value, _SIMPLE) or (isinstance(value, tuple) and all(
                    isinstance(item, _SIMPLE) for item in value)):
                arguments.append(f"{name}={value!r}")
                continue
        if parameter.default is not parameter.empty:
            continue
        raise ValueError(f"{cls.__name__}: its constructor's {name!r} is not kept by the "
                         "instance: not rebuildable")
    imports = _search_path(cls) + f"from {where} import {cls.__name__}"
    if "config=CONFIG" in arguments:
        imports += "\n" + _config_lines(config)
    return imports, f"{cls.__name__}({', '.join(arguments)})"


def _free_axes(module: torch.nn.Module, part: PartProfile, call: dict[str, Any]
               ) -> dict[tuple[int, int], tuple[int, int]]:
    """The (input, axis) pairs the part takes at other extents: a token or batch axis,
    not one its weights fix. Axes of one extent across the inputs (the tokens of the
    hidden states, the position ids and the rotary tables) are tried together, at half
    as long again; an axis whose change breaks the call leaves the group, one by one.
    Returns each free axis with its group's first (whose size they share)."""
    inputs = [spec for _, spec in slots(part.args, part.kwargs)]
    groups: dict[int, list[tuple[int, int]]] = {}
    for index, spec in enumerate(inputs):
        for axis, extent in enumerate(spec.shape):
            if extent >= MIN_SIZE:
                groups.setdefault(extent, []).append((index, axis))
    free: dict[tuple[int, int], tuple[int, int]] = {}
    for extent, members in groups.items():
        group = list(members)
        while group and not _runs(module, call, inputs, set(group), extent):
            group = next((smaller for smaller in ([m for m in group if m != member]
                                                  for member in group)
                          if smaller and _runs(module, call, inputs, set(smaller), extent)),
                         [])
        free |= {member: group[0] for member in group}
    return free


def _runs(module: torch.nn.Module, call: dict[str, Any], inputs: list[ArgumentSpec],
          changed: set[tuple[int, int]], extent: int) -> bool:
    """Whether ``module`` takes the call with the ``changed`` axes at extent * 1.5."""
    shapes = [[extent + extent // 2 if (index, axis) in changed else size
               for axis, size in enumerate(spec.shape)] for index, spec in enumerate(inputs)]
    args, kwargs = unflatten(call, [_example(spec, shape)
                                    for spec, shape in zip(inputs, shapes, strict=True)])
    try:
        with torch.no_grad():
            module(*args, **kwargs)
    except Exception:
        return False
    return True


def _example(spec: ArgumentSpec, shape: list[int]) -> Any:
    if spec.kind != "tensor":
        return spec.value
    dtype = getattr(torch, spec.dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.randint(0, max(spec.bound, 1), shape, dtype=dtype)


def _source(part: PartProfile, building: tuple[str, str], described: str,
            free: dict[tuple[int, int], tuple[int, int]], call: dict[str, Any]) -> str:
    importing, construction = building
    named = slots(part.args, part.kwargs)
    sizes, inputs, names = [], [], []
    for index, (name, spec) in enumerate(named):
        dims = []
        for axis, extent in enumerate(spec.shape):
            if (index, axis) not in free:  # fixed by the part's weights
                dims.append(str(extent))
                continue
            first, first_axis = free[(index, axis)]  # one size for axes that go together
            size = f"{named[first][0]}_dim{first_axis}"
            if (first, first_axis) == (index, axis):
                sizes.append(f"{size} = {extent}")
            dims.append(size)
        inputs.append(_tensor(spec, dims))
        names.append(name)
    header = [f'"""{part.class_name} from {described}: {len(part.paths)} instance(s), '
              f'{part.share:.1%} of the phase profiled.', "",
              "Extracted by `swarmfab model`: the part as the model builds it, called on the",
              "shapes the profile recorded (CALL: the call's form, which the assembled",
              'model maps its own calls through)."""', "import torch", "import torch.nn as nn",
              ""]
    body = [
        importing, "", *sizes, f"CALL = {call!r}", "", "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.part = {construction}",
        "",
        f"    def forward(self, {', '.join(names)}):",
        f"        result = self.part({call_source(part.args, part.kwargs)})",
        f"        return {result_source(part.output)}",
        "", "",
        "def get_inputs():",
        f"    return [{', '.join(inputs)}]",
        "", "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(header + body)


def _tensor(spec: ArgumentSpec, dims: list[str]) -> str:
    shape = ", ".join(dims) if dims else ""
    dtype = f"torch.{spec.dtype}"
    if spec.dtype.startswith(("float", "bfloat", "complex")):
        return f"torch.randn({shape}{', ' if shape else ''}dtype={dtype})"
    if spec.dtype == "bool":
        return f"torch.ones({shape}{', ' if shape else ''}dtype=torch.bool)"
    return f"torch.randint(0, {max(spec.bound, 1)}, ({shape}{',' if len(dims) == 1 else ''}), " \
           f"dtype={dtype})"


def _saved(module: torch.nn.Module, path: Path) -> tuple[str, str]:
    """(imports, construction) loading ``module`` saved whole."""
    buffer = io.BytesIO()
    torch.save(module, buffer)
    imports = _search_path(type(module))
    if buffer.tell() <= INLINE_BYTES:
        text = base64.b64encode(buffer.getvalue()).decode()
        lines = "\n".join(f"    {text[i:i + 96]!r}" for i in range(0, len(text), 96))
        return (f"{imports}import base64\nimport io\n\nSAVED = (\n{lines}\n)",
                "torch.load(io.BytesIO(base64.b64decode(SAVED)), weights_only=False)")
    saved = path.with_suffix(".pt")
    saved.write_bytes(buffer.getvalue())
    saved.chmod(0o644)
    return imports, f"torch.load({str(saved.resolve())!r}, weights_only=False)"


def _search_path(cls: type) -> str:
    """The line that makes ``cls``'s module importable where it is not installed (a
    target's own file, imported from its directory), else nothing."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if "." in cls.__module__ or not file or any(
            part in ("site-packages", "dist-packages") for part in Path(file).parts):
        return ""
    return f"import sys\nsys.path.insert(0, {str(Path(file).resolve().parent)!r})\n"


def _config_lines(config: Any) -> str:
    """The model's config rebuilt from its class and its values (as saved)."""
    cls = type(config)
    values = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return (f"import json\nfrom {cls.__module__} import {cls.__name__}\n"
            f"CONFIG = {cls.__name__}.from_dict(json.loads({values!r}))")
