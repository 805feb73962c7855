"""torch_memory_saver backend: region-tagged pause/resume of a component's CUDA memory.

Imported only when the package is installed and the device is CUDA (``heron.device.
memory_backend_kind``); on CPU the package imports but any use fails.

How torch_memory_saver works (its source, ``torch_memory_saver/entrypoint.py``): memory
allocated inside ``region(tag, enable_cpu_backup)`` comes from a CUDA MemPool whose allocator
maps physical pages under reserved virtual addresses (CUDA VMM); ``pause(tag)`` copies the
contents to a host shadow (with ``enable_cpu_backup``) and unmaps the pages, ``resume(tag)``
maps new pages at the same addresses and copies back. Every tensor object, view and pointer
stays valid. heron uses ``hook_mode="torch"`` (a pluggable allocator in this process), which
needs no ``LD_PRELOAD``; it must be chosen before the library's first use, and
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` is refused by the library.

Tags, per component (``<name>:<region>``):

| region | what is allocated in it | when |
|---|---|---|
| ``weights`` | params, buffers (and the trainer's reference model) | moved in by ``adopt`` when residency attaches |
| ``state`` | trainer: gradients, optimizer state (created lazily by the first step), activations' cached blocks; engine: the KV cache | every ``@needs_device`` operation runs inside it (``allocation_scope``) |

Gradients and optimizer state share the ``state`` region: both are allocated inside ``train()``
by autograd and the optimizer, which heron does not split without entering the trainer's code.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager

import torch
import torch_memory_saver

from heron.device import free_device_bytes, synchronize
from heron.residency.accounting import TensorInventory, distinct_storages, local_tensor, storage_bytes
from heron.residency.errors import ResidencyError

REGIONS = ("weights", "state")


def _saver():
    """The library's singleton, in torch hook mode unless this process was started with its
    LD_PRELOAD hook (``torch_memory_saver.configure_subprocess``)."""
    saver = torch_memory_saver.torch_memory_saver
    if saver._impl is None and "torch_memory_saver" not in os.environ.get("LD_PRELOAD", ""):
        saver.hook_mode = "torch"
    return saver


class TorchMemorySaverBackend:
    keeps_memory = False
    adopts_storages = True
    """``adopt`` must move the component's existing tensors into the weights region at attach."""

    def __init__(self, name: str, device: torch.device):
        self.device = device
        self.tags = {region: f"{name}:{region}" for region in REGIONS}
        self._saver = _saver()
        self._paused = False

    def adopt(self, inventory: TensorInventory) -> None:
        """Re-allocates every distinct storage of ``inventory`` inside the weights region and
        points its tensors at the copy (``tensor.data = ...``: the same Parameter/buffer objects
        stay, so optimizers built on them keep working). Tensors sharing a storage keep sharing."""
        copies: dict[int, torch.UntypedStorage] = {}
        with torch.no_grad(), self._saver.region(tag=self.tags["weights"], enable_cpu_backup=True):
            for _, storage in distinct_storages(inventory):
                new = torch.empty(storage.nbytes(), dtype=torch.uint8, device=storage.device).untyped_storage()
                new.copy_(storage)
                copies[storage._cdata] = new
            for tensors in inventory.values():
                for tensor in tensors:
                    local = local_tensor(tensor)
                    new = copies[local.untyped_storage()._cdata]
                    local.data = torch.empty(0, dtype=local.dtype, device=local.device).set_(
                        new, local.storage_offset(), local.size(), local.stride()
                    )

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        """Pauses both regions; checks that the device really got about the state's bytes back
        (tensors allocated outside the regions would silently stay)."""
        held = storage_bytes(inventory)
        state_bytes = sum(held.values())
        synchronize(self.device)
        free_before = free_device_bytes(self.device)[0]
        for tag in self.tags.values():
            self._saver.pause(tag)
        self._paused = True
        freed = free_device_bytes(self.device)[0] - free_before
        if freed < state_bytes // 2:
            self.restore()
            raise ResidencyError(
                f"torch_memory_saver freed {freed} of {state_bytes} state bytes for '{self.tags['weights']}': the state "
                f"was not allocated inside its regions; attach residency right after building the component, or use "
                f"host offload (uninstall torch_memory_saver)"
            )
        return held

    def restore(self) -> None:
        for tag in reversed(list(self.tags.values())):
            self._saver.resume(tag)
        synchronize(self.device)
        self._paused = False

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        # storages keep their size while paused (the virtual addresses stay reserved): report 0
        held = storage_bytes(inventory)
        return {category: 0 for category in held} if self._paused else held

    def allocation_scope(self) -> AbstractContextManager:
        return self._saver.region(tag=self.tags["state"], enable_cpu_backup=True)
