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
    def joined(cls, parts: list[tuple[PreallocatedLayer, "torch.Tensor | None", int, int]], length: int,
               capacity: int) -> PreallocatedLayer:
        """One layer of ``join_caches``: the parts' rows and slots, filled up to ``length``."""
        layer = cls(capacity)
        key_store = _joined_store([(p._key_store, rows, a, b) for p, rows, a, b in parts], length, capacity)
        value_store = _joined_store([(p._value_store, rows, a, b) for p, rows, a, b in parts], length, capacity)
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


CachePart = tuple[DynamicCache, "torch.Tensor | None", int, int]  # cache, rows [R_part] (None: all), start, end


def join_caches(config, parts: list[CachePart], length: int, capacity: int) -> DynamicCache:
    """A cache for ``config`` of ``capacity`` slots holding the rows of every part in order: part
    (cache, rows, start, end) gives its rows ``rows`` with their slots [start, end) moved to end
    at slot ``length``, which becomes the filled length (each part's end - start <= length).

    Why: prompts prefilled in groups of similar length (heron.rollout.embedded) each fill a cache
    of their own width; the batch decodes from one cache, the keys of each row ending at the same
    slot like left-padded prompts'. Each key carries its own position (RoPE), so where it sits
    among the slots changes only which slots a row's mask leaves out."""
    cache = DynamicCache(config=config)
    cache.layers = [
        PreallocatedLayer.joined([(c.layers[index], rows, start, end) for c, rows, start, end in parts], length, capacity)
        for index in range(len(parts[0][0].layers))
    ]
    return cache


def _joined_store(parts: list[tuple[torch.Tensor, "torch.Tensor | None", int, int]], length: int,
                  capacity: int) -> torch.Tensor:
    """Stores [R_i, H, C_i, D] -> [sum R_part, H, capacity, D] (see ``join_caches``). The slots
    before a part's keys are zeroed: its rows' masks leave them out, but attention still gives
    their values a zero weight, and 0 x NaN (from uninitialised memory) would be NaN."""
    first = parts[0][0]
    total = sum(store.shape[0] if rows is None else len(rows) for store, rows, _, _ in parts)
    joined = first.new_empty(total, first.shape[1], capacity, first.shape[3])  # [R, H, C, D]
    row = 0
    for store, rows, start, end in parts:
        count, width = (store.shape[0] if rows is None else len(rows)), end - start
        target = joined.narrow(0, row, count)  # [R_part, H, C, D]
        target.narrow(2, 0, length - width).zero_()
        window = store.narrow(2, start, width)  # [R_store, H, width, D]
        if rows is None:
            target.narrow(2, length - width, width).copy_(window)
        else:
            torch.index_select(window, 0, rows, out=target.narrow(2, length - width, width))
        row += count
    return joined
