"""State pools: the delta rule called the way serving engines call it.

An engine keeps each running sequence's recurrent state in a slot of a pool
``[N, HV, K, V]`` and decodes a batch by naming every sequence's slot (vLLM's
``state_indices``); with ``inplace_final_state=True`` (fla's name) the final states go
back into the pool, so a step neither gathers, copies nor allocates a state. Every
``forward`` of the family takes both keywords:

- ``inplace_final_state=True``: the final states are written into ``initial_state``,
  which is returned as the final state;
- ``state_indices`` (B distinct integers, with ``inplace_final_state=True`` only):
  ``initial_state`` is a pool, and sequence b starts from, and writes back to, slot
  ``state_indices[b]``; without them sequence b uses slot b.

:func:`pooled` gives any plain ``forward`` that interface by gathering and scattering
(what a PyTorch slot does); a compiled kernel with the ``<symbol>_indexed`` entry point
reads and writes the pool where it lies.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["checked_indices", "draw_indices", "pool_and_slots", "pooled", "state_dims",
           "state_pool", "with_pools"]

Plain = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def state_pool(initial_state: torch.Tensor | None, dims: tuple[int, int, int],
               batch: int) -> torch.Tensor:
    """The pool an in-place call writes into; ValueError when it cannot be one (``batch``:
    the states it must hold at least, sequence b in slot b; 0 with state indices)."""
    if initial_state is None:
        raise ValueError("inplace_final_state=True needs initial_state: the states to update")
    if initial_state.dim() != 4 or tuple(initial_state.shape[1:]) != dims:
        raise ValueError(f"the state pool must be [N, {', '.join(map(str, dims))}] "
                         f"(N states of [HV, K, V]); got {list(initial_state.shape)}")
    if initial_state.dtype != torch.float32 or not initial_state.is_contiguous():
        raise ValueError("an in-place state pool must be a contiguous float32 tensor: its "
                         "states are written where they lie")
    if initial_state.shape[0] < batch:
        raise ValueError(f"without state_indices the pool needs one state per sequence "
                         f"({batch}); it holds {initial_state.shape[0]}")
    return initial_state


def checked_indices(state_indices: Any, batch: int, slots: int,
                    device: torch.device) -> torch.Tensor:
    """``state_indices`` as a contiguous int64 tensor beside the pool; ValueError unless
    they are ``batch`` distinct slots of a pool of ``slots`` states."""
    indices = torch.as_tensor(state_indices)
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise ValueError(f"state_indices must be integers, got {indices.dtype}")
    if indices.dim() != 1 or indices.numel() != batch:
        raise ValueError(f"state_indices must hold one slot per sequence ({batch}); got "
                         f"shape {list(indices.shape)}")
    values = indices.tolist()  # checked in Python: a decode step's few slots, every layer
    for position, value in enumerate(values):
        if not 0 <= value < slots:
            raise ValueError(f"state_indices[{position}] = {value} is outside the pool of "
                             f"{slots} states")
    if len(set(values)) != batch:
        raise ValueError("state_indices name a slot twice: two sequences would write one "
                         "state")
    return indices.to(device=device, dtype=torch.int64).contiguous()


def draw_indices(batch: int, slots: int, generator: torch.Generator) -> torch.Tensor:
    """Distinct slots in a shuffled order (a continuous batch's sequences are anywhere)."""
    return torch.randperm(slots, generator=generator)[:batch]


def state_dims(q: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int]:
    """One state's sizes ``(HV, K, V)`` for a call with these q and v."""
    return v.shape[2], q.shape[3], v.shape[3]


def pool_and_slots(q: torch.Tensor, v: torch.Tensor, initial_state: torch.Tensor | None,
                   state_indices: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The pool an in-place call with these q and v writes into, and its sequences' slots
    (None: sequence b in slot b); ValueError when either cannot be used."""
    batch = q.shape[0]
    pool = state_pool(initial_state, state_dims(q, v), batch if state_indices is None else 0)
    if state_indices is None:
        return pool, None
    return pool, checked_indices(state_indices, batch, pool.shape[0], pool.device)


def pooled(plain: Plain, advance: Callable[..., torch.Tensor] | None = None
           ) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """``plain(q, k, v, g, beta, scale, initial_state, output_final_state)`` given the
    pool keywords: the pooled states are gathered, passed, and written back.

    ``advance(q, k, v, g, beta, scale, states) -> o``, where given, serves in-place calls
    instead: it advances ``states`` where they lie, the pool's own first rows when there
    are no state indices (nothing copied), else a gathered copy written back."""

    def forward(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        beta: torch.Tensor, scale: float | None = None,
        initial_state: torch.Tensor | None = None, output_final_state: bool = False,
        inplace_final_state: bool = False, state_indices: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not inplace_final_state:
            if state_indices is not None:
                raise ValueError("state_indices index a pool updated in place: pass "
                                 "inplace_final_state=True")
            return plain(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state)
        pool, slots = pool_and_slots(q, v, initial_state, state_indices)
        if advance is not None:
            run = slice(0, q.shape[0]) if slots is None else _run_of(slots)
            if run is not None:  # the states where they lie
                return advance(q, k, v, g, beta, scale, pool[run]), pool
            assert slots is not None
            states = pool[slots]
            o = advance(q, k, v, g, beta, scale, states)
            pool.index_copy_(0, slots, states)
            return o, pool
        if slots is None:
            batch = q.shape[0]
            o, state = plain(q, k, v, g, beta, scale=scale, initial_state=pool[:batch],
                             output_final_state=True)
            assert state is not None
            pool[:batch].copy_(state)
            return o, pool
        o, state = plain(q, k, v, g, beta, scale=scale, initial_state=pool[slots],
                         output_final_state=True)
        assert state is not None
        pool.index_copy_(0, slots, state.to(pool.dtype))
        return o, pool

    return forward


def _run_of(slots: torch.Tensor) -> slice | None:
    """The slots as a slice of the pool where they are consecutive and ascending (a call
    then works in the pool itself); None where they must be gathered."""
    if slots.device.type != "cpu":
        return None
    values = slots.tolist()  # a few ints: cheaper than building and comparing a tensor
    if not values:
        return slice(0, 0)
    first = values[0]
    return slice(first, first + len(values)) \
        if values == list(range(first, first + len(values))) else None


@functools.lru_cache(maxsize=64)
def _takes_pools(forward: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the call say
        return True
    return any(p.name == "inplace_final_state" or p.kind is p.VAR_KEYWORD for p in parameters)


def with_pools(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` itself where it takes the pool keywords, else :func:`pooled` around it
    (fla's own signature, an exported package from before pools)."""
    return forward if _takes_pools(forward) else pooled(forward)
