"""``ServerSideMemory``: the residency backend of an engine whose device memory lives in a server.

heron holds nothing of such an engine on its side (its holdings are empty), so what sleeping
releases is up to the server:
- a server that can sleep (vLLM on CUDA, started with ``--enable-sleep-mode``): ``release`` and
  ``restore`` call the adapter's ``sleep`` / ``wake``. UNTESTED: no GPU on heron's test machines.
- a server that cannot (vLLM on CPU): both are no-ops; the state machine still tracks
  ``asleep``/``awake``, so colocated turn-taking and its invariants hold as for any component.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from heron.residency.accounting import TensorInventory


class ServerSideMemory:
    keeps_memory = False

    def __init__(self, sleep: Callable[[], None] | None = None, wake: Callable[[], None] | None = None):
        self._sleep, self._wake = sleep, wake

    def release(self, inventory: TensorInventory) -> dict[str, int]:
        """Asks the server to sleep (where it can); heron's side releases nothing it counts."""
        if self._sleep is not None:
            self._sleep()
        return {category: 0 for category in inventory}

    def restore(self) -> None:
        if self._wake is not None:
            self._wake()

    def held_bytes(self, inventory: TensorInventory) -> dict[str, int]:
        """Bytes heron holds for the engine: none (the server's memory is not heron's to count)."""
        return {category: 0 for category in inventory}

    def allocation_scope(self) -> AbstractContextManager:
        return nullcontext()
