"""A KV cache whose storage is allocated once per batch, for the embedded engine's decode loop.

Why: transformers' ``DynamicLayer`` grows by ``torch.cat`` on every step, which copies every
row's whole cache once per layer per token: O(T²) bytes moved for T new tokens, and a transient
second copy of the cache. Measured on a 3 M-parameter model, 32 rows, one thread: no difference
at 64 new tokens, 9 % less decode time at 512. A ``PreallocatedLayer`` writes each step's keys and
values into a buffer sized for the prompt plus every new token, and hands attention views of
the filled prefix [B, H, filled, D]: the same values, the same length, so attention computes
the same bits as with the growing cache (tests/unit/test_kv_cache.py checks tokens and logprobs
against the DynamicCache oracle).

Unlike transformers' ``StaticCache`` it is not padded to its capacity for attention (that would
change the reduction length and the bits, and attend over empty slots); it is not meant for
``torch.compile``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One decoder layer's keys and values [B, H, capacity, D], of which the first ``filled``
    positions are live; ``keys``/``values`` are views of that prefix, as a DynamicLayer's would be."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.filled = 0
        self._key_store: torch.Tensor | None = None  # [B, H, capacity, D]
        self._value_store: torch.Tensor | None = None  # [B, H, capacity, D]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, key_dim = key_states.shape
        self.device = key_states.device
        self._key_store = key_states.new_empty(batch, heads, self.capacity, key_dim)
        self._value_store = value_states.new_empty(batch, value_states.shape[1], self.capacity, value_states.shape[3])
        self.is_initialized = True
        self._expose()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Writes key/value states [B, H, L, D] after the filled prefix; returns the prefix views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.filled + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache full: {end} positions needed, capacity {self.capacity}")
        self._key_store[:, :, self.filled : end] = key_states
        self._value_store[:, :, self.filled : end] = value_states
        self.filled = end
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keeps rows ``indices`` [B'] (in that order, repeats allowed) of the buffers. Only the
        filled slots are copied: the rest of the new buffers is written by later steps. (Copying
        whole buffers, as indexing does, took 1.65 ms for a [64, 4, 300, 64] float32 buffer at
        every fill; the filled slots alone 0.13 ms at 60 filled, 0.54 at 150, 1.21 at 290, on a
        2-core AMD EPYC. The engine drops rows each time one finishes.)"""
        if self.is_initialized:
            self._key_store = _select_filled(self._key_store, indices, self.filled)
            self._value_store = _select_filled(self._value_store, indices, self.filled)
            self._expose()

    def reset(self) -> None:
        self._key_store = self._value_store = None
        self.filled = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("PreallocatedLayer does not crop (the embedded engine never asks it to)")

    def _expose(self) -> None:
        self.keys = self._key_store[:, :, : self.filled]
        self.values = self._value_store[:, :, : self.filled]

    @classmethod
    def joined(cls, parts: list[PreallocatedLayer], length: int, capacity: int) -> PreallocatedLayer:
        """One layer of ``join_caches``: the parts' rows, their filled slots ending at ``length``."""
        layer = cls(capacity)
        key_store = _joined_store([(part._key_store, part.filled) for part in parts], length, capacity)
        value_store = _joined_store([(part._value_store, part.filled) for part in parts], length, capacity)
        DynamicLayer.lazy_initialization(layer, key_store, value_store)  # what transformers sets (device, dtype)
        layer._key_store, layer._value_store, layer.filled = key_store, value_store, length
        layer._expose()
        return layer


def _select_filled(store: torch.Tensor, indices: torch.Tensor, filled: int) -> torch.Tensor:
    """store [B, H, C, D] -> a new [B', H, C, D] whose rows are ``store``'s rows ``indices`` [B'] on
    the first ``filled`` slots (the other slots are not initialised)."""
    selected = store.new_empty(len(indices), *store.shape[1:])  # [B', H, C, D]
    torch.index_select(store.narrow(2, 0, filled), 0, indices, out=selected.narrow(2, 0, filled))
    return selected


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache for ``config`` whose full-attention layers hold ``capacity`` positions
    preallocated (prompt + new tokens). Other layer kinds (sliding windows, linear attention)
    keep transformers' own class."""
    cache = DynamicCache(config=config)
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def joinable(config) -> bool:
    """Whether ``join_caches`` can place rows of ``config``'s caches: every layer of
    ``preallocated_cache`` is a ``PreallocatedLayer`` (no sliding-window or linear-attention layer)."""
    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers)


def join_caches(config, caches: list[DynamicCache], length: int, capacity: int) -> DynamicCache:
    """A cache for ``config`` of ``capacity`` slots holding the rows of every cache in order, each
    one's filled slots moved to end at slot ``length``, which becomes the filled length (each
    cache's filled length <= ``length``).

    Why: prompts prefilled in groups of similar length (heron.rollout.embedded) each fill a cache
    of their own width; the batch decodes from one cache, the keys of each row ending at the same
    slot like left-padded prompts'. Each key carries its own position (RoPE), so where it sits
    among the slots changes only which slots a row's mask leaves out."""
    joined = DynamicCache(config=config)
    joined.layers = [PreallocatedLayer.joined([cache.layers[index] for cache in caches], length, capacity)
                     for index in range(len(caches[0].layers))]
    return joined


def _joined_store(stores: list[tuple[torch.Tensor, int]], length: int, capacity: int) -> torch.Tensor:
    """(store [R_i, H, C_i, D], filled_i) pairs -> [sum R_i, H, capacity, D] (see ``join_caches``).
    The slots left of each part's keys are zeroed: its rows' masks leave them out, but attention
    still gives their values a zero weight, and 0 x NaN (from uninitialised memory) is NaN."""
    first = stores[0][0]
    joined = first.new_empty(sum(store.shape[0] for store, _ in stores), first.shape[1], capacity, first.shape[3])
    row = 0
    for store, filled in stores:
        target = joined.narrow(0, row, store.shape[0])  # [R_i, H, C, D]
        target.narrow(2, 0, length - filled).zero_()
        target.narrow(2, length - filled, filled).copy_(store.narrow(2, 0, filled))
        row += store.shape[0]
    return joined  # [R, H, C, D]
