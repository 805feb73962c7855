"""Loud failure instead of garbage: while a component is asleep, running any of its modules,
taking or loading a state dict of a module or optimizer (what checkpointing and export do)
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
                refuse = self._refuse(label)
                self._handles.append(module.register_forward_pre_hook(refuse))
                self._handles.append(module.register_state_dict_pre_hook(self._refuse(f"the state_dict of {label}")))
                self._handles.append(module.register_load_state_dict_pre_hook(self._refuse(f"load_state_dict of {label}")))
        for optimizer in self.optimizers:
            label = f"its optimizer ({type(optimizer).__name__}"
            self._handles.append(optimizer.register_step_pre_hook(self._refuse(f"{label}.step)")))
            self._handles.append(optimizer.register_state_dict_pre_hook(self._refuse(f"{label}.state_dict)")))
            self._handles.append(optimizer.register_load_state_dict_pre_hook(self._refuse(f"{label}.load_state_dict)")))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _refuse(self, what: str):
        def hook(*args, **kwargs):
            raise ReleasedMemoryError(self.message(what))

        return hook
