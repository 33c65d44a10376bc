"""Per-sequence memory: fixed state slots for KDA layers, a paged pool for attention.

KDA layers carry a recurrent state ``[H, K, V]`` and a short-convolution window
``[kernel-1, 3*H*D]`` per sequence whatever its length, so each running sequence holds
one *slot*. Attention layers cache one MLA latent per token; those live in fixed-size
blocks handed out from a free list, and a sequence's block table maps its positions to
pool rows. The scheduler decides who gets memory; these classes only track it.
"""

from __future__ import annotations

import heapq

import torch

from swarmfab.engine.config import ModelConfig
from swarmfab.errors import EngineError

__all__ = ["BlockPool", "KvCache", "StateSlots"]


class StateSlots:
    """``num_slots`` zero-initialised KDA states, handed out one per running sequence."""

    def __init__(self, config: ModelConfig, num_slots: int, dtype: torch.dtype):
        heads, dim = config.linear_heads, config.linear_head_dim
        layers = len(config.kda_layers)
        self.recurrent = torch.zeros(layers, num_slots, heads, dim, dim, dtype=torch.float32)
        self.conv = torch.zeros(layers, num_slots, config.conv_kernel - 1, 3 * heads * dim,
                                dtype=dtype)
        self._free = list(range(num_slots))  # a heap: the lowest free slot goes first,
        # so running sequences hold one run of slots (decoded without a gather)
        self.num_slots = num_slots

    @property
    def free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        """A zeroed slot; the caller checked :attr:`free` first."""
        slot = heapq.heappop(self._free)
        self.recurrent[:, slot].zero_()
        self.conv[:, slot].zero_()
        return slot

    def release(self, slot: int) -> None:
        heapq.heappush(self._free, slot)


class BlockPool:
    """A free list of KV block ids; ``used`` never exceeds ``num_blocks``."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise EngineError("the KV cache needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise EngineError(f"asked for {count} KV blocks with {len(self._free)} free")
        return [self._free.pop() for _ in range(count)]

    def release(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))


class KvCache:
    """The latent rows of every attention layer: ``[layers, blocks * block_size, latent]``."""

    def __init__(self, config: ModelConfig, pool: BlockPool, dtype: torch.dtype):
        rows = pool.num_blocks * pool.block_size
        self.latents = torch.zeros(len(config.attention_layers), rows, config.latent_dim,
                                   dtype=dtype)
        self.pool = pool

    @staticmethod
    def bytes_per_token(config: ModelConfig, dtype: torch.dtype) -> int:
        element = torch.empty((), dtype=dtype).element_size()
        return len(config.attention_layers) * config.latent_dim * element
