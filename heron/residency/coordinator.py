"""The device budget rule of colocation: components that share a device take turns.

With ``colocate=True``, waking a component first puts every other component registered on the
same device to sleep; a component busy in an operation cannot be put to sleep, so waking
another one then fails with an error naming both (colocated operations must not nest across
components). With ``colocate=False`` the coordinator only reports memory.

All components of a device share one lock, so two threads cannot wake two of them at once.
"""

from __future__ import annotations

import threading

from heron.residency.errors import ResidencyError
from heron.residency.state import Residency, State


class Coordinator:
    def __init__(self, colocate: bool):
        self.colocate = colocate
        self.members: list[Residency] = []
        self._device_locks: dict[str, threading.RLock] = {}

    def register(self, residency: Residency) -> Residency:
        if self.colocate and residency.backend.keeps_memory:
            raise ResidencyError(
                f"{residency.name}: colocated components must be able to sleep; enable offload for it "
                f"or set colocate=false"
            )
        if any(m.name == residency.name for m in self.members):
            raise ResidencyError(f"a component named {residency.name!r} is already registered")
        residency.coordinator = self
        if self.colocate:
            residency._lock = self._device_locks.setdefault(residency.device_key, threading.RLock())
        self.members.append(residency)
        return residency

    def sharing_device(self, residency: Residency) -> list[Residency]:
        return [m for m in self.members if m is not residency and m.device_key == residency.device_key]

    def make_room(self, waking: Residency) -> None:
        """Puts the components sharing ``waking``'s device to sleep (colocated only)."""
        if not self.colocate:
            return
        for other in self.sharing_device(waking):
            if other.state is State.ASLEEP:
                continue
            busy = other.device_operation()
            if busy is not None:
                raise ResidencyError(
                    f"cannot wake {waking.name} for '{waking.current_operation() or 'wake'}': {other.name} shares "
                    f"device {waking.device_key} and is running '{busy}'; colocated components take turns, "
                    f"so finish that operation first"
                )
            other.sleep()

    def awake_on(self, device_key: str) -> list[str]:
        return [m.name for m in self.members if m.device_key == device_key and m.state is not State.ASLEEP]

    def metrics(self) -> dict[str, float]:
        """Per component: device bytes held now (total and per category) and bytes released by
        its last sleep -- logged per rollout."""
        out: dict[str, float] = {}
        for m in self.members:
            held = m.memory_report()
            out[f"memory/{m.name}_device_bytes"] = float(sum(held.values()))
            for category, num_bytes in held.items():
                out[f"memory/{m.name}_{category}_bytes"] = float(num_bytes)
            out[f"memory/{m.name}_released_bytes"] = float(sum(m.released_bytes.values()))
            for figure, num_bytes in m.sleep_memory.items():  # heron.residency.sleep_memory
                out[f"memory/{m.name}_{figure}_bytes"] = float(num_bytes)
        return out
