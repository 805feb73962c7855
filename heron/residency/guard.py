"""Loud failure instead of garbage: while a component is asleep, running any of its modules
or stepping its optimizer raises ``ReleasedMemoryError`` naming the component and the
operation, instead of reading 0-byte storages (a segfault on CPU, "invalid argument" or an
illegal address on CUDA -- the prior-art crash).

The hooks exist only while the component sleeps, so an awake component pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from heron.residency.errors import ReleasedMemoryError


class SleepGuard:
    def __init__(
        self,
        component: str,
        modules: Sequence[tuple[str, torch.nn.Module]],
        optimizers: Sequence[torch.optim.Optimizer],
        current_operation: Callable[[], str | None],
    ):
        self.component = component
        self.modules = modules
        self.optimizers = optimizers
        self.current_operation = current_operation
        self._handles: list = []

    def message(self, what: str) -> str:
        op = self.current_operation()
        if op is None:
            return (
                f"{self.component} is asleep (device memory released) and {what} was touched outside any "
                f"declared operation; call the component's operations (they wake it) instead of its "
                f"tensors directly"
            )
        return (
            f"{self.component} is asleep (device memory released) but operation '{op}' touched {what}; "
            f"declare '{op}' with @needs_device so it wakes {self.component} first"
        )

    def install(self) -> None:
        for root_name, root in self.modules:
            for name, module in root.named_modules():
                label = f"module '{root_name}.{name}'" if name else f"module '{root_name}'"
                self._handles.append(module.register_forward_pre_hook(self._module_hook(label)))
        for optimizer in self.optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._optimizer_hook))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _module_hook(self, label: str):
        def hook(module, args):
            raise ReleasedMemoryError(self.message(label))

        return hook

    def _optimizer_hook(self, optimizer, args, kwargs):
        raise ReleasedMemoryError(self.message(f"its optimizer ({type(optimizer).__name__}.step)"))
