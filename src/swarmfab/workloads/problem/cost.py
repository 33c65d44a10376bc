"""What one call of a problem file's Model costs: its FLOPs and the bytes it must move,
both read on the meta device (shapes only: nothing is allocated or computed).

FLOPs are PyTorch's FLOP counter on the Model's forward (matrix products, convolutions,
attention); a Model it counts nothing in (elementwise work, reductions) is given one
operation per output element, a lower bound. Bytes are the inputs', the weights' and
the outputs' at 4 bytes an element: what an ideal fused kernel reads and writes once.
With both, the roofline column and the impossible-speed check work for problem files.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["meta_cost"]


def meta_cost(namespace: dict[str, Any]) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one call of the problem executed in ``namespace``; None where
    the Model cannot run on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"), torch.no_grad():
            model = namespace["Model"](*namespace["get_init_inputs"]())
            inputs = list(namespace["get_inputs"]())
            with FlopCounterMode(display=False) as counter:
                result = model(*inputs)
    except Exception:
        return None
    outputs = list(result) if isinstance(result, tuple | list) else [result]
    tensors = [*model.state_dict().values(), *inputs, *outputs]
    elements = sum(t.numel() for t in tensors if isinstance(t, torch.Tensor))
    flops = float(counter.get_total_flops())
    if flops <= 0:
        flops = float(sum(t.numel() for t in outputs if isinstance(t, torch.Tensor)))
    return flops, 4.0 * elements
