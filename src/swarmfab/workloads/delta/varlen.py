"""Packed sequences of several lengths in one call (fla's ``cu_seqlens``), as engines
prefill many requests at once.

q, k, v, g and beta hold the sequences one after another along T, with B = 1;
``cu_seqlens`` (int64, N + 1 offsets from 0 to T) says where each starts, and sequence n
starts from ``initial_state[n]`` and ends in ``final_state[n]`` ([N, HV, K, V]). A compiled
candidate may export ``<symbol>_varlen`` (common.h); any other forward is called once per
sequence (:func:`with_varlen`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import torch

from swarmfab.errors import CandidateError
from swarmfab.workloads._base import Forward

__all__ = ["checked_offsets", "offsets", "per_sequence", "takes_varlen", "with_varlen"]


def offsets(lengths: Sequence[int]) -> torch.Tensor:
    """``cu_seqlens`` of sequences of these lengths: 0, then the running sums."""
    return torch.tensor([0, *torch.tensor(list(lengths)).cumsum(0).tolist()],
                        dtype=torch.int64)


def checked_offsets(cu_seqlens: object, steps: int) -> list[int]:
    """The offsets as integers: from 0 to ``steps``, never decreasing; CandidateError
    otherwise (a caller's mistake, said before any kernel reads them)."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or \
            cu_seqlens.is_floating_point() or cu_seqlens.numel() < 2:
        raise CandidateError("cu_seqlens must be N + 1 integer offsets")
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if bounds[0] != 0 or bounds[-1] != steps or any(b < a for a, b in pairwise(bounds)):
        raise CandidateError(f"cu_seqlens {bounds[:8]}...: offsets from 0 to T = {steps}, "
                             "never decreasing")
    return bounds


def takes_varlen(forward: Forward) -> bool:
    """Whether ``forward`` takes ``cu_seqlens`` itself."""
    try:
        return "cu_seqlens" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def per_sequence(forward: Forward, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 g: torch.Tensor, beta: torch.Tensor, scale: float | None,
                 initial_state: torch.Tensor | None, output_final_state: bool,
                 cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``forward`` (a plain call) once per packed sequence: o concatenated along T, the
    final states stacked [N, HV, K, V]."""
    if q.shape[0] != 1:
        raise CandidateError(f"packed sequences come with B = 1, not {q.shape[0]}")
    bounds = checked_offsets(cu_seqlens, q.shape[1])
    outputs, states = [], []
    for n, (start, end) in enumerate(pairwise(bounds)):
        piece = slice(start, end)
        state = None if initial_state is None else initial_state[n:n + 1]
        o, final = forward(q[:, piece], k[:, piece], v[:, piece], g[:, piece],
                           beta[:, piece], scale=scale, initial_state=state,
                           output_final_state=output_final_state)
        outputs.append(o)
        states.append(final)
    o = torch.cat(outputs, dim=1)
    if not output_final_state:
        return o, None
    return o, torch.cat(states, dim=0)


def with_varlen(forward: Forward, native: Callable[..., Any] | None = None) -> Forward:
    """``forward`` taking ``cu_seqlens`` too: ``native`` where given (or ``forward``
    itself, where it takes it), else one call per sequence."""
    if native is None and takes_varlen(forward):
        return forward

    @functools.wraps(forward)
    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             beta: torch.Tensor, scale: float | None = None,
             initial_state: torch.Tensor | None = None, output_final_state: bool = False,
             cu_seqlens: torch.Tensor | None = None, **options: Any) -> Any:
        if cu_seqlens is None:
            return forward(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                           output_final_state=output_final_state, **options)
        if options.get("inplace_final_state"):
            raise CandidateError("packed sequences (cu_seqlens) are not updated in a pool")
        if native is not None:
            return native(q, k, v, g, beta, scale, initial_state, output_final_state,
                          cu_seqlens)
        return per_sequence(forward, q, k, v, g, beta, scale, initial_state,
                            output_final_state, cu_seqlens)

    return call
