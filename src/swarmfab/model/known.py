"""Parts whose heart is an operator swarmfab already has as a workload.

Kimi Linear's KDA layer (``KimiLinearDeltaAttention`` in transformers) is projections
and gates around the delta rule; the delta rule is the ``kda`` workload, which the
factory optimises at the model's own shapes, and whose exported champion replaces the
layer's prefill and decode calls (``patch_transformers()``). Such a part is not
extracted as a problem file: it becomes a ``kda`` goal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KnownPart", "known_part"]


@dataclass(frozen=True)
class KnownPart:
    """A part's workload and the shapes the model calls it at."""

    workload: str
    shapes: tuple[dict[str, int], ...]


def _kimi_delta_attention(module: Any, tokens: int, batch: int) -> KnownPart:
    heads, dim = int(module.num_heads), int(module.head_dim)
    return KnownPart("kda", ({"B": 1, "T": tokens, "H": heads, "K": dim, "V": dim},
                             {"B": batch, "T": 1, "H": heads, "K": dim, "V": dim}))


_KNOWN: dict[str, Callable[[Any, int, int], KnownPart]] = {
    "KimiLinearDeltaAttention": _kimi_delta_attention,
}


def known_part(module: Any, tokens: int, batch: int) -> KnownPart | None:
    """The workload ``module``'s class maps to, at the phases' shapes, if any."""
    make = _KNOWN.get(type(module).__name__)
    return None if make is None else make(module, tokens, batch)
