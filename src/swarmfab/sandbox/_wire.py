"""What a job's answer may contain when it crosses back to the parent.

A job's process runs candidate code, so every byte it sends is hostile until read
safely. Plain ``pickle.loads`` runs whatever callable the bytes name: a candidate that
writes its own message to the job's pipe would run ``os.system`` in the parent, outside
every isolation step. So answers are pickled from a closed vocabulary and unpickled
with nothing else:

- the builtin containers and scalars (lists, tuples, dicts, strings, bytes, numbers,
  booleans, ``None``), which pickle builds without naming any callable;
- tensors, sent as their raw bytes with a dtype from a fixed list and a shape that must
  account for exactly those bytes;
- records: instances of the dataclasses the caller names (``records=``), rebuilt
  through their own constructor from a dict of fields.

Every other global the bytes name is refused with :class:`AnswerError`. The rebuilding
functions are made afresh for each answer, so bytes that try to set attributes on them
change nothing beyond that answer. Whether the fields hold the right kinds of values is
the caller's to check (the answer is still the candidate's word).
"""

from __future__ import annotations

import dataclasses
import io
import math
import pickle
from collections.abc import Callable, Iterable
from typing import Any

from swarmfab.errors import SandboxError

__all__ = ["AnswerError", "dumps", "loads"]

# sent by name; the parent maps each back to its dtype
_DTYPES = ("float64", "float32", "float16", "bfloat16", "complex128", "complex64",
           "int64", "int32", "int16", "int8", "uint8", "bool")


class AnswerError(SandboxError):
    """A job's answer holds something an answer may not contain."""


def _tensor(dtype: str, shape: tuple[int, ...], data: bytes) -> Any:
    """Placeholder named in the bytes; :func:`loads` substitutes a checking rebuild."""
    raise AnswerError("tensors are rebuilt by swarmfab.sandbox._wire.loads only")


def _record(name: str, fields: dict[str, Any]) -> Any:
    """Placeholder named in the bytes; :func:`loads` substitutes a checking rebuild."""
    raise AnswerError("records are rebuilt by swarmfab.sandbox._wire.loads only")


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        import torch

        if isinstance(obj, torch.Tensor):
            plain = obj.detach().to("cpu").contiguous()
            data = plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b""
            return _tensor, (str(plain.dtype).removeprefix("torch."), tuple(plain.shape), data)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return _record, (type(obj).__qualname__, fields)
        return NotImplemented


def dumps(value: Any) -> bytes:
    """``value`` as bytes that :func:`loads` can read (dataclasses become records)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def loads(data: bytes, records: Iterable[type] = ()) -> Any:
    """Read an answer; only the vocabulary in the module's docstring is constructed."""
    allowed = {cls.__qualname__: cls for cls in records}
    rebuild = {"_tensor": _rebuild_tensor(), "_record": _rebuild_record(allowed)}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == __name__ and name in rebuild:
                return rebuild[name]
            raise AnswerError(f"the job's answer names {module}.{name}, which an answer "
                              "may not contain")

    try:
        return Unpickler(io.BytesIO(data)).load()
    except AnswerError:
        raise
    except Exception as exc:  # truncated, malformed, or a record's constructor refused it
        raise AnswerError(f"the job's answer could not be read: {type(exc).__name__}: "
                          f"{exc}") from exc


def _rebuild_tensor() -> Callable[..., Any]:
    def tensor(dtype: str, shape: tuple[int, ...], data: bytes) -> Any:
        import torch

        if dtype not in _DTYPES or not isinstance(data, bytes):
            raise AnswerError(f"a tensor of dtype {dtype!r} may not be part of an answer")
        if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
            raise AnswerError(f"a tensor's shape must be non-negative integers, not {shape!r}")
        kind = getattr(torch, dtype)
        size = torch.empty((), dtype=kind).element_size()
        if math.prod(shape) * size != len(data):
            raise AnswerError(f"a tensor of shape {shape} and dtype {dtype} cannot have "
                              f"{len(data)} bytes")
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
            torch.empty(0, dtype=torch.uint8)
        return flat.view(kind).reshape(shape)

    return tensor


def _rebuild_record(allowed: dict[str, type]) -> Callable[..., Any]:
    def record(name: str, fields: dict[str, Any]) -> Any:
        cls = allowed.get(name) if isinstance(name, str) else None
        if cls is None:
            raise AnswerError(f"a record of type {name!r} may not be part of this answer")
        if not (isinstance(fields, dict) and all(isinstance(k, str) for k in fields)):
            raise AnswerError(f"a {name} record must come as a dict of fields")
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(fields) - known:
            raise AnswerError(f"a {name} record has unknown fields {sorted(set(fields) - known)}")
        return cls(**fields)

    return record
