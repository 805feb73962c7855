"""torch_memory_saver backend (CUDA only; imported only when the package is installed and
the device is CUDA -- on CPU the package imports but any use fails).

torch_memory_saver manages only memory allocated inside its ``region(tag)``: pausing the tag
unmaps the physical pages but keeps the virtual addresses, so every tensor object stays valid;
``enable_cpu_backup=True`` keeps the contents on the host across a pause. The component must
therefore allocate its state inside ``allocation_scope()`` (model load and optimizer state:
the residency scope enters it around every declared operation, so optimizer state created
lazily by the first step lands in the region too). Needs the library's LD_PRELOAD hook or
``hook_mode="torch"``; see ``bench/gpu_residency_check.py``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
import torch_memory_saver

from heron.residency.accounting import TensorInventory, storage_bytes
from heron.residency.errors import ResidencyError


class TorchMemorySaverBackend:
    keeps_memory = False

    def __init__(self, tag: str):
        self.tag = tag
        self._saver = torch_memory_saver.torch_memory_saver
        self._paused = False

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        """Pauses the region; checks that the device really got about the state's bytes back
        (tensors allocated outside ``allocation_scope()`` would silently stay)."""
        held = storage_bytes(inventory)
        state_bytes = sum(held.values())
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        self._saver.pause(self.tag)
        self._paused = True
        freed = torch.cuda.mem_get_info()[0] - free_before
        if freed < state_bytes // 2:
            self._saver.resume(self.tag)
            self._paused = False
            raise ResidencyError(
                f"torch_memory_saver freed {freed} of {state_bytes} state bytes for '{self.tag}': the state was "
                f"not allocated inside allocation_scope(); build the component inside it or use host offload"
            )
        return held

    def restore(self) -> None:
        self._saver.resume(self.tag)
        self._paused = False

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        # storages keep their size while paused (virtual memory stays mapped): report 0
        held = storage_bytes(inventory)
        return {category: 0 for category in held} if self._paused else held

    def allocation_scope(self) -> AbstractContextManager:
        return self._saver.region(tag=self.tag, enable_cpu_backup=True)
