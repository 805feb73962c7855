"""The memory backend protocol, the no-op backend, and how a backend is chosen.

A backend releases the device memory of a set of tensors while keeping their contents
somewhere (host RAM, or the backend's own CPU backup) and restores them bit-exactly into the
*same* tensor objects, so optimizers, hooks and engines that hold references keep working.

| backend | when | how |
|---|---|---|
| ``KeepResident`` | offload disabled | releases nothing; the component never sleeps |
| ``HostOffload`` | CPU, or CUDA without torch_memory_saver | copy storages to host (pinned on CUDA), ``resize_(0)`` |
| ``TorchMemorySaverBackend`` | CUDA with ``torch_memory_saver`` installed | pause/resume a tagged region |
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, runtime_checkable

import torch

from heron.device import memory_backend_kind, pins_host_memory
from heron.residency.accounting import TensorInventory, storage_bytes


@runtime_checkable
class MemoryBackend(Protocol):
    keeps_memory: bool
    """True when ``release`` frees nothing (offload disabled): the component stays awake."""

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        """Frees the device memory of every tensor in ``inventory``, keeping the contents;
        returns the device bytes released per category."""
        ...

    def restore(self) -> None:
        """Re-allocates what ``release`` freed and puts the contents back, in the same tensors."""
        ...

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        """Device bytes held per category right now."""
        ...

    def allocation_scope(self) -> AbstractContextManager:
        """Context in which the component must allocate the tensors this backend can release
        (a no-op except for torch_memory_saver, which only manages memory allocated inside it)."""
        ...


class KeepResident:
    """Offload disabled: nothing is released, so ``sleep()`` leaves the component awake."""

    keeps_memory = True

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        raise AssertionError("KeepResident.release: a component without offload never sleeps")

    def restore(self) -> None:
        raise AssertionError("KeepResident.restore: a component without offload never sleeps")

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        return storage_bytes(inventory)

    def allocation_scope(self) -> AbstractContextManager:
        return nullcontext()


def select_backend(device: torch.device, offload: bool, tag: str) -> MemoryBackend:
    """The backend for a component on ``device``: none without offload; torch_memory_saver on
    CUDA when installed (imported only then: it needs CUDA and LD_PRELOAD); host offload else."""
    kind = memory_backend_kind(device, offload)
    if kind == "keep":
        return KeepResident()
    if kind == "torch_memory_saver":
        from heron.residency.torch_memory_saver import TorchMemorySaverBackend

        return TorchMemorySaverBackend(tag, device)
    from heron.residency.host_offload import HostOffload

    return HostOffload(pin_memory=pins_host_memory(device))
