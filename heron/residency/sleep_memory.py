"""Memory figures of a component around its sleep, for the ``memory/*`` metrics.

The same four names on every device, per component, recorded by each sleep:
``allocated_before_sleep``, ``reserved_before_sleep``, ``allocated_after_sleep``,
``reserved_after_sleep`` (bytes).

- CUDA: ``torch.cuda.memory_allocated`` / ``memory_reserved`` of the process on the component's
  device (``heron.device.allocator_bytes``). These are process-wide: with trainer and engine in one
  process, the difference before - after is what this component's sleep gave back.
- CPU (no device allocator): the residency backend's own byte counts of the component's
  inventory (``heron.residency.accounting``); allocated = reserved there.
"""

from __future__ import annotations

import torch

from heron.device import allocator_bytes
from heron.residency.accounting import TensorInventory

PHASES = ("before_sleep", "after_sleep")


def memory_figures(device, backend, inventory: TensorInventory) -> dict[str, int] | None:
    """``{"allocated", "reserved"}`` bytes now, or None for a component whose device is not
    one of this process's (a driver-side proxy of a Ray actor: the actor records its own)."""
    if not isinstance(device, torch.device):
        return None
    figures = allocator_bytes(device)
    if figures is not None:
        return figures
    held = sum(backend.held_bytes(inventory).values())
    return {"allocated": held, "reserved": held}


def sleep_record(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int]:
    """``{"allocated_before_sleep": ..., ...}`` from the figures of both phases ({} without figures)."""
    if before is None or after is None:
        return {}
    return {f"{kind}_{phase}": figures[kind] for phase, figures in zip(PHASES, (before, after)) for kind in figures}
