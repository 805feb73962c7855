"""Host-offload backend: copy each storage to a host buffer, free the device storage, and on
wake re-allocate it and copy back. Portable (CPU, CUDA, any device with resizable storages).

Why storages and ``resize_(0)``: a tensor object points at a StorageImpl; resizing that storage
to 0 bytes frees its memory while every tensor, view, ``nn.Parameter`` and optimizer-state
entry keeps pointing at the same StorageImpl. ``resize_(nbytes)`` on wake allocates fresh
memory for it, and the copy back restores the contents bit-exactly; no reference anywhere
needs updating. The price: until restored, touching such a tensor reads a 0-byte storage
(a segfault on CPU, an illegal address on CUDA), which is why asleep components are guarded
(``heron.residency.guard``).

On CPU the "device" is host RAM too: freeing a storage gives its pages to glibc, which keeps
blocks below its (adaptive) mmap threshold instead of returning them, so after freeing, the
backend calls ``malloc_trim(0)`` -- measured by bench/residency.py: without it a sleeping
476 MiB trainer kept all 476 MiB of freed storages in the process RSS.

On CUDA the host buffers are pinned so both copies run at full PCIe bandwidth; the copies are
queued non-blocking and synchronised once per transition.
"""

from __future__ import annotations

import ctypes
import functools
from contextlib import AbstractContextManager, nullcontext

import torch

from heron.device import HOST, release_cached, synchronize
from heron.residency.accounting import TensorInventory, distinct_storages, storage_bytes
from heron.residency.errors import ResidencyError


def _bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """A flat uint8 tensor [nbytes] over ``storage`` (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


@functools.cache
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): freed memory goes back as that allocator decides
        return None


def return_freed_memory_to_os() -> None:
    """glibc ``malloc_trim(0)``: gives freed heap pages back to the OS (no-op elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class HostOffload:
    keeps_memory = False

    def __init__(self, pin_memory: bool = False):
        self.pin_memory = pin_memory
        self._saved: list[tuple[torch.UntypedStorage, torch.Tensor]] = []  # (device storage, host copy)

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        if self._saved:
            raise AssertionError("HostOffload.release called twice without restore")
        released = storage_bytes(inventory)
        storages = [s for _, s in distinct_storages(inventory) if s.nbytes() > 0]
        for storage in storages:
            if not storage.resizable():
                raise ResidencyError(
                    "cannot offload a non-resizable storage (memory-mapped or from numpy); "
                    "clone such tensors into ordinary memory before attaching residency"
                )
        saved = []
        for storage in storages:
            host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=self.pin_memory)  # [nbytes]
            host.copy_(_bytes_view(storage), non_blocking=self.pin_memory)
            saved.append((storage, host))
        devices = {storage.device for storage, _ in saved}
        for device in devices:
            synchronize(device)
        for storage, _ in saved:  # free only once every copy is complete
            storage.resize_(0)
        for device in devices:  # freed blocks go back to the driver, so the next component gets them
            release_cached(device)
        if any(device == HOST for device in devices):
            return_freed_memory_to_os()
        self._saved = saved
        return released

    def restore(self) -> None:
        for storage, host in self._saved:
            storage.resize_(host.numel())
            _bytes_view(storage).copy_(host, non_blocking=self.pin_memory)
        for device in {storage.device for storage, _ in self._saved}:
            synchronize(device)
        self._saved = []  # drops the host copies
        if not self.pin_memory:
            return_freed_memory_to_os()

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        return storage_bytes(inventory)

    def host_bytes(self) -> int:
        """Bytes of host buffers holding released contents (0 when awake)."""
        return sum(host.numel() for _, host in self._saved)

    def allocation_scope(self) -> AbstractContextManager:
        return nullcontext()
