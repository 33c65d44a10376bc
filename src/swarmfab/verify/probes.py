"""Anti-cheat probes: behaviours an honest kernel has and an exploit lacks.

They run inside the sandboxed worker, around the candidate's calls, and need no
reference; the parent turns their findings into named checks. Each probe closes one
known exploit:

- inputs unchanged: a kernel may not edit its inputs so the reference agrees;
- outputs do not alias inputs: returning a view of an input is not computing (a state
  pool updated in place is the one input its output is, :meth:`Workload.written_in_place`;
  its every state, decoded or not, is then compared with the reference);
- outputs settled at return: no thread or process may finish the work later
  (the outputs are re-read after a pause; lazy or asynchronous results change). Every
  case's outputs can share one pause (:class:`Settling`, :func:`settle`): each has had
  at least that long;
- no processes left running: a candidate's children outlive nothing;
- no work after return: the process is idle in a pause after the last call (a thread
  left burning CPU, or work done off the clock, shows up);
- fresh inputs in the same buffers: new values written into the very tensors of the
  previous call must give the new answer (catches caching by shape or by pointer);
- deterministic: the same inputs in new tensors give bitwise the same outputs;
- a nudged input: one element of every input halved in place must change the answer
  accordingly (catches caches keyed on a sample of the inputs);
- outputs are plain tensors: exactly ``torch.Tensor``, no subclass (a subclass can
  compute when it is read, so every check would force it and the clock would not);
- inputs as engines lay them out: a case's ``layout`` hands the call views into wider,
  NaN-padded buffers or column-major copies (:func:`laid_out`), same values.
NaN-filled output buffers (every element must be written) are set by the workload's C
wrapper, and impossible speed is judged against the roofline by the evaluator.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from swarmfab.workloads import Case, Inputs

__all__ = [
    "BATTERY",
    "SETTLE_SECONDS",
    "Settling",
    "aliased_outputs",
    "child_processes",
    "cpu_while_idle",
    "laid_out",
    "modified_inputs",
    "not_plain_tensors",
    "nudge_seed",
    "nudged",
    "settle",
    "snapshot",
    "twin_case",
    "unsettled_outputs",
    "write_into",
]

BATTERY = "battery"  # the origin of the battery's cases: they skip the cache probes
SETTLE_SECONDS = 0.02  # outputs re-read at least this long after their call returned
SPIN_DOWN_SECONDS = 0.1  # thread pools spin a little after a call before they sleep
IDLE_SECONDS = 0.3  # then the process should be idle for this long
IDLE_CPU_LIMIT = 0.03  # CPU seconds it may burn in that pause (10% of one core)


def twin_case(case: Case) -> Case:
    """Same shape and distribution, other values: used to refill the same buffers."""
    return case.twin()


def nudged(inputs: Inputs, seed: int) -> dict[str, torch.Tensor | float | None]:
    """A copy of ``inputs`` with one element of every float tensor halved, at positions
    drawn from ``seed``: a kernel that keys a cache on a sample of its inputs misses the
    change and answers the old question."""
    gen = torch.Generator().manual_seed(seed)
    copy = snapshot(inputs)
    for value in copy.values():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            flat = value.view(-1)
            index = int(torch.randint(flat.numel(), (1,), generator=gen))
            flat[index] = flat[index] * 0.5
    return copy


def nudge_seed(case: Case) -> int:
    return (case.seed * 48271 + 11) % 2**31


def snapshot(values: Inputs) -> dict[str, torch.Tensor | float | None]:
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def modified_inputs(before: Inputs, after: Inputs,
                    in_place: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Names of input tensors whose contents differ from the snapshot ``before``, except
    those the call writes by design (``in_place``: output name -> input name)."""
    written = set((in_place or {}).values())
    changed = []
    for name, value in before.items():
        if name in written:
            continue
        now = after[name]
        tensors = isinstance(value, torch.Tensor) and isinstance(now, torch.Tensor)
        if tensors and (now.shape != value.shape or not torch.equal(value, now)):  # type: ignore[union-attr, arg-type]
            changed.append(name)
    return tuple(changed)


def _byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliased_outputs(outputs: Mapping[str, torch.Tensor], inputs: Inputs,
                    in_place: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Outputs whose memory overlaps any input tensor's memory, but the one input an
    output is written into by design (``in_place``: output name -> input name)."""
    in_place = in_place or {}
    found = []
    for name, out in outputs.items():
        if not isinstance(out, torch.Tensor) or out.numel() == 0:
            continue
        low, high = _byte_range(out)
        ranges = [_byte_range(value) for key, value in inputs.items()
                  if isinstance(value, torch.Tensor) and key != in_place.get(name)]
        if any(low < end and start < high for start, end in ranges):
            found.append(name)
    return tuple(found)


class Settling:
    """One call's outputs as they were when it returned, to be read again after a pause.

    On a CUDA device the copy is queued on the caller's stream, as a user's next
    operation would be; :meth:`changed` follows a device-wide synchronisation, so work
    left on a side stream (unordered with the caller's) shows as a change. Many calls'
    outputs can share one pause (:func:`settle`): each has had at least that long."""

    def __init__(self, outputs: Mapping[str, torch.Tensor]):
        self.outputs = {n: t for n, t in outputs.items() if isinstance(t, torch.Tensor)}
        self.first = {n: t.detach().clone() for n, t in self.outputs.items()}

    def changed(self) -> tuple[str, ...]:
        """Outputs that differ from their copy at return (after :func:`settle`)."""
        return tuple(n for n, t in self.first.items() if not torch.equal(t, self.outputs[n]))


def settle(settlings: Sequence[Settling], pause: bool = True) -> None:
    """Let ``settlings``' outputs settle: every device's queued work finished, then a
    pause of :data:`SETTLE_SECONDS` (``pause=False`` where the caller pauses at least
    that long itself); nothing to settle, no pause."""
    if not settlings:
        return
    if any(t.is_cuda for s in settlings for t in s.first.values()):
        torch.cuda.synchronize()
    if pause:
        time.sleep(SETTLE_SECONDS)


def unsettled_outputs(outputs: Mapping[str, torch.Tensor]) -> tuple[str, ...]:
    """Outputs that still change after the call returned (re-read after a pause)."""
    settling = Settling(outputs)
    settle([settling])
    return settling.changed()


def cpu_while_idle() -> float:
    """CPU seconds this process (all threads) uses during a pause with no call running.

    An honest kernel is idle between calls: its thread pools spin briefly and sleep (the
    first :data:`SPIN_DOWN_SECONDS` are not counted). A thread left working, or a cheat
    doing work "off the clock", keeps burning: on a busy host it gets less of a core,
    but over :data:`IDLE_SECONDS` still far more than an idle process."""
    time.sleep(SPIN_DOWN_SECONDS)
    before = time.process_time()
    time.sleep(IDLE_SECONDS)
    return time.process_time() - before


def child_processes() -> list[int]:
    """Live children of this process (any thread's), from /proc; [] where /proc is absent."""
    children: list[int] = []
    tasks = Path(f"/proc/{os.getpid()}/task")
    try:
        for task in tasks.iterdir():
            text = (task / "children").read_text()
            children.extend(int(pid) for pid in text.split())
    except OSError:
        return children
    return children


def write_into(target: Inputs, source: Inputs) -> None:
    """Copy ``source``'s values into ``target``'s tensors in place (same pointers)."""
    for name, value in target.items():
        new = source[name]
        if isinstance(value, torch.Tensor) and isinstance(new, torch.Tensor):
            value.copy_(new)


def not_plain_tensors(outputs: Mapping[str, object]) -> tuple[str, ...]:
    """Outputs that are not exactly ``torch.Tensor`` (a subclass, or anything else)."""
    return tuple(f"{name} ({type(value).__name__})" for name, value in outputs.items()
                 if type(value) is not torch.Tensor)


_PAD = 3  # elements before each row of a strided input (a storage offset, an odd stride)


def laid_out(inputs: Inputs, layout: str, keep: frozenset[str] = frozenset()
             ) -> dict[str, torch.Tensor | float | None]:
    """``inputs`` with the same values in another memory layout. ``strided``: each
    floating-point tensor a view into a wider buffer, at an offset, the padding NaN (so
    reading past a row shows); ``transposed``: the last two dimensions stored
    column-major (a vector: every other element of a buffer). Inputs named in ``keep``
    (written in place by design, as a state pool) stay as they are."""
    if layout == "contiguous":
        return dict(inputs)
    laid: dict[str, torch.Tensor | float | None] = {}
    for name, value in inputs.items():
        if (name in keep or not isinstance(value, torch.Tensor)
                or not value.is_floating_point() or value.dim() == 0 or value.numel() == 0):
            laid[name] = value
            continue
        laid[name] = _strided(value) if layout == "strided" else _transposed(value)
    return laid


def _strided(value: torch.Tensor) -> torch.Tensor:
    *rows, width = value.shape
    wide = torch.full((*rows, width * 2 + _PAD), float("nan"), dtype=value.dtype,
                      device=value.device)
    view = wide[..., _PAD:_PAD + width]
    view.copy_(value)
    return view


def _transposed(value: torch.Tensor) -> torch.Tensor:
    if value.dim() < 2:
        spread = torch.full((value.numel() * 2,), float("nan"), dtype=value.dtype,
                            device=value.device)[::2]
        spread.copy_(value)
        return spread
    column_major = torch.empty_like(value.transpose(-1, -2).contiguous()).transpose(-1, -2)
    column_major.copy_(value)
    return column_major
