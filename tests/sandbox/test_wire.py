"""Answers from jobs: what crosses back to the parent, and what is refused."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass

import pytest
import torch

from swarmfab.sandbox._wire import AnswerError, dumps, loads


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    outputs: dict[str, torch.Tensor] | None = None
    seconds: tuple[float, ...] = ()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16,
                                   torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_tensors_of_every_sent_dtype_come_back_equal(dtype: torch.dtype) -> None:
    value = (torch.randn(3, 5) * 4).to(dtype)
    back = loads(dumps({"x": value}))["x"]
    assert back.dtype == dtype and torch.equal(back, value)


def test_views_empty_and_scalar_tensors_keep_their_values_not_their_storage() -> None:
    base = torch.arange(24.0).reshape(4, 6)
    view = base[:, 1::2].t()  # not contiguous; a slice of a larger storage
    back = loads(dumps([view, torch.empty(0, 3), torch.tensor(2.5)]))
    assert torch.equal(back[0], view) and back[0].untyped_storage().nbytes() == view.numel() * 4
    assert back[1].shape == (0, 3) and back[2].item() == 2.5


def test_records_are_rebuilt_only_when_named() -> None:
    run = Run("b1", {"o": torch.ones(2)}, (0.1, 0.2))
    back = loads(dumps([run]), records=(Run,))
    assert back[0].name == "b1" and back[0].seconds == (0.1, 0.2)
    assert torch.equal(back[0].outputs["o"], torch.ones(2))
    with pytest.raises(AnswerError, match="record of type 'Run'"):
        loads(dumps([run]))


class _Payload:
    def __reduce__(self) -> tuple:
        return os.system, ("true",)


@pytest.mark.parametrize("hostile", [
    pickle.dumps(("ok", _Payload())),
    pickle.dumps(("ok", torch.ones(2))),  # torch's own reduction names its rebuild functions
    pickle.dumps(("ok", Run("x"))),  # a record, but not as a record
])
def test_bytes_that_name_any_other_global_are_refused(hostile: bytes) -> None:
    with pytest.raises(AnswerError, match="which an answer may not contain"):
        loads(hostile, records=(Run,))


def _rebuilt(dtype: str, shape: tuple, data: bytes) -> bytes:
    """Bytes calling the tensor rebuild with any arguments, as a hostile job could."""
    from swarmfab.sandbox import _wire

    class Forged:
        def __reduce__(self) -> tuple:
            return _wire._tensor, (dtype, shape, data)

    return dumps(Forged())


@pytest.mark.parametrize(("forged", "message"), [
    (("float32", (3,), b"\0" * 8), "cannot have 8 bytes"),
    (("float32", (-1,), b""), "non-negative"),
    (("object", (1,), b"\0"), "dtype 'object'"),
    (("float32", (2, 2.5), b""), "non-negative integers"),
])
def test_a_forged_tensor_is_refused(forged: tuple, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        loads(_rebuilt(*forged))


def test_truncated_bytes_and_unknown_fields_are_refused() -> None:
    with pytest.raises(AnswerError, match="could not be read"):
        loads(dumps([1, 2, 3])[:-3])

    @dataclass
    class Other:  # same name as the allowed record, other fields
        name: str
        secret: int

    Other.__qualname__ = "Run"
    with pytest.raises(AnswerError, match="unknown fields"):
        loads(dumps(Other("x", 1)), records=(Run,))
