"""Memory accounting: bytes of storage a component holds, per state category.

A category is a name for one kind of state ("params", "grads", "optimizer", "buffers",
"kv_cache", "reference"). Storages shared by several tensors (views, tied weights) are counted
once, in the first category that lists them, so the total is the real footprint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

TensorInventory = Mapping[str, Iterable[torch.Tensor]]
"""category -> the tensors of that category a component holds right now."""


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage holds the memory: a DTensor's (FSDP2 shard's) local tensor,
    else the tensor itself (a DTensor's own ``untyped_storage()`` is not its memory)."""
    to_local = getattr(tensor, "to_local", None)
    if to_local is None:
        return tensor
    with torch.no_grad():
        return to_local()


def distinct_storages(inventory: TensorInventory) -> list[tuple[str, torch.UntypedStorage]]:
    """(category, storage) for every distinct storage in the inventory, first category wins."""
    seen: set[int] = set()
    storages = []
    for category, tensors in inventory.items():
        for tensor in tensors:
            storage = local_tensor(tensor).untyped_storage()
            key = storage._cdata  # identity of the StorageImpl, also for zero-byte storages
            if key not in seen:
                seen.add(key)
                storages.append((category, storage))
    return storages


def storage_bytes(inventory: TensorInventory) -> dict[str, int]:
    """Bytes currently allocated per category (0 for a category whose storages are released)."""
    held = {category: 0 for category in inventory}
    for category, storage in distinct_storages(inventory):
        held[category] += storage.nbytes()
    return held
