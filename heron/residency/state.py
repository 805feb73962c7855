"""The residency state machine of one component: where its device memory is, and the
scope every declared operation runs in.

States and transitions (``sleep()`` and ``wake()`` are idempotent)::

    AWAKE --sleep()--> SLEEPING --> ASLEEP --wake()--> WAKING --> AWAKE
                           \\                              /
                            +------> FAILED <------------+   (a backend raised; terminal)

- AWAKE: all state (params, grads, optimizer, buffers, process groups) is on the device.
- ASLEEP: device memory released, contents kept on the host by the backend; the component's
  modules and optimizer are guarded (touching them raises ``ReleasedMemoryError``).
- SLEEPING / WAKING: a transition is running (visible to other threads only).
- FAILED: a release or restore raised half-way; contents may be partly gone, every further
  use raises ``ResidencyError`` with the original cause.

``resident(op)`` is the scope of a declared operation: it wakes the component if asleep (the
coordinator first puts colocated components to sleep) and restores the previous state on
exit, also when the operation raises. Scopes nest: only the outermost one changes state.
A component with offload disabled (``KeepResident`` backend) never sleeps: ``sleep()`` is a
no-op and the state stays AWAKE.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from heron.residency.accounting import TensorInventory
from heron.residency.backend import MemoryBackend
from heron.errors import ComponentError
from heron.residency.errors import ResidencyError
from heron.residency.guard import SleepGuard
from heron.residency.in_flight import Hold, InFlight
from heron.residency.sleep_memory import memory_figures, sleep_record
from heron.residency.process_group import ManagedProcessGroup

if TYPE_CHECKING:
    from heron.residency.coordinator import Coordinator


class State(enum.Enum):
    AWAKE = "awake"
    SLEEPING = "sleeping"
    ASLEEP = "asleep"
    WAKING = "waking"
    FAILED = "failed"


@dataclass
class Holdings:
    """What a component holds on its device, as the residency layer needs to see it: the
    component declares it (``holdings()`` of the trainer and engine endpoints), the residency
    layer releases and guards exactly that and never reads the component's attributes."""

    inventory: Callable[[], TensorInventory] = dict
    """category -> tensors, gathered at each sleep (optimizer state appears after the first step)."""
    modules: Sequence[tuple[str, torch.nn.Module]] = ()
    """(name, module) pairs guarded while asleep."""
    optimizers: Sequence[torch.optim.Optimizer] = ()
    """Optimizers whose ``step`` is guarded while asleep."""
    process_groups: dict[str, ManagedProcessGroup] = field(default_factory=dict)
    """Groups released on sleep and recreated on wake."""
    device: torch.device | str = "cpu"
    """The device these tensors live on (picks the memory backend; colocated components share it)."""
    backend: Callable[[bool], MemoryBackend] | None = None
    """``offload -> backend`` for a component whose memory lives outside this process (a server
    engine sleeps through its server); None: the backend is chosen from ``device``."""


@dataclass(eq=False)
class _Operation:
    name: str
    needs_device: bool


class Residency:
    def __init__(
        self, name: str, holdings: Holdings, backend: MemoryBackend, *, device: torch.device | str,
        wait_timeout_s: float = 600.0, state: State = State.AWAKE,
    ):
        self.name = name
        self.holdings = holdings
        self.backend = backend
        self.device_key = str(device)
        self.device = device
        self.wait_timeout_s = wait_timeout_s
        self.state = state  # ASLEEP for a proxy of a remote component that already rests asleep
        self.failure: BaseException | None = None
        self.coordinator: Coordinator | None = None
        self.released_bytes: dict[str, int] = {}  # per category, by the last sleep
        self.sleep_memory: dict[str, int] = {}  # allocated/reserved bytes before and after the last sleep
        self.num_transitions = 0
        self._lock = threading.RLock()  # shared by all components of a device when colocated
        self._ops: list[_Operation] = []
        self._in_flight = InFlight(name)
        self._guard = SleepGuard(name, holdings.modules, holdings.optimizers, self.current_operation)

    # --- queries -----------------------------------------------------------------------
    def current_operation(self) -> str | None:
        """The innermost declared operation running now, if any."""
        return self._ops[-1].name if self._ops else None

    def device_operation(self) -> str | None:
        """A running operation that needs the device, if any (the component is busy)."""
        return next((op.name for op in reversed(self._ops) if op.needs_device), None)

    def memory_report(self) -> dict[str, int]:
        """Device bytes held now per category."""
        return self.backend.held_bytes(self.holdings.inventory())

    def process_group(self, name: str):
        """The live process group ``name`` (raises while asleep)."""
        return self.holdings.process_groups[name].group

    # --- transitions ---------------------------------------------------------------------
    def sleep(self) -> None:
        """Releases device memory and process groups, keeping contents on the host. Waits
        for in-flight holds first. No-op if asleep, or if offload is disabled."""
        with self._lock:
            if self.state is State.ASLEEP or self.backend.keeps_memory:
                return
            self._check_usable("sleep")
            busy = self.device_operation()
            if busy is not None:
                raise ResidencyError(f"cannot put {self.name} to sleep: operation '{busy}' is running on it")
            self._in_flight.wait_idle(self.wait_timeout_s)
            self._transition(State.SLEEPING, State.ASLEEP, self._release)

    def wake(self) -> None:
        """Restores device memory and process groups bit-exactly into the same tensors; the
        coordinator first puts components sharing the device to sleep. No-op if awake."""
        with self._lock:
            if self.state is State.AWAKE:
                return
            self._check_usable("wake")
            if self.coordinator is not None:
                self.coordinator.make_room(self)
            self._transition(State.WAKING, State.AWAKE, self._restore)

    def _transition(self, during: State, after: State, action: Callable[[], None]) -> None:
        self.state = during
        try:
            action()
        except BaseException as error:
            self.state, self.failure = State.FAILED, error
            if isinstance(error, ComponentError):  # already names the component and the fix
                raise
            raise ResidencyError(
                f"{self.name}: {during.value} failed ({type(error).__name__}: {error}); its state may be "
                f"lost, rebuild the component"
            ) from error
        self.state = after
        self.num_transitions += 1

    def _release(self) -> None:
        inventory = self.holdings.inventory()
        before = memory_figures(self.device, self.backend, inventory)
        for group in self.holdings.process_groups.values():
            group.release()
        self.released_bytes = self.backend.release(inventory)
        self.sleep_memory = sleep_record(before, memory_figures(self.device, self.backend, inventory))
        self._guard.install()

    def _restore(self) -> None:
        self.backend.restore()
        for group in self.holdings.process_groups.values():
            group.restore()
        self._guard.remove()

    def _check_usable(self, operation: str) -> None:
        if self.state is State.FAILED:
            raise ResidencyError(
                f"{self.name} failed earlier ({type(self.failure).__name__}: {self.failure}); "
                f"cannot run '{operation}', rebuild the component"
            )

    # --- scopes --------------------------------------------------------------------------
    @contextmanager
    def resident(self, operation: str) -> Iterator[None]:
        """Scope of an operation that needs the device: wakes if needed, restores on exit."""
        op = _Operation(operation, needs_device=True)
        with self._lock:
            self._check_usable(operation)
            was_awake = self.state is State.AWAKE
            outermost = self.device_operation() is None
            self.wake()
            self._ops.append(op)
        try:
            with ExitStack() as stack:
                if outermost:
                    stack.enter_context(self.backend.allocation_scope())
                yield
        finally:
            with self._lock:
                self._ops.remove(op)
                if not was_awake and self.device_operation() is None:
                    self.sleep()

    @contextmanager
    def host_only(self, operation: str) -> Iterator[None]:
        """Scope of an operation that works from host copies: never wakes anything; recorded
        so that a guard error can name it if it touches device memory after all."""
        op = _Operation(operation, needs_device=False)
        with self._lock:
            self._ops.append(op)
        try:
            yield
        finally:
            with self._lock:
                self._ops.remove(op)

    def hold(self, reason: str) -> Hold:
        """Registers in-flight work that reads this component's memory after its operation
        returns (e.g. async checkpoint staging); ``sleep()`` waits until it is released.
        Take it while awake, inside the @needs_device operation that starts the work."""
        with self._lock:
            self._check_usable(f"hold({reason!r})")
            if self.state is not State.AWAKE:
                raise ResidencyError(
                    f"{self.name} is {self.state.value}: take the hold for {reason!r} inside a @needs_device "
                    f"operation, while its memory is resident"
                )
            return self._in_flight.hold(reason)

    def in_flight(self) -> list[str]:
        """Reasons of the holds alive now."""
        return self._in_flight.reasons()
