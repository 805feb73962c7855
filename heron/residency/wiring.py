"""Attaches residency to the run's components from outside: what each one holds on its
device (by category), which modules and optimizers to guard, which backend releases it, and
the coordinator that makes colocated components take turns.

A component with offload enabled *rests asleep*: it is awake only inside its declared
operations (each scope restores the previous state, asleep), so the loop never calls
``sleep``/``wake``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from heron.device import copy_if_mapped
from heron.residency.accounting import local_tensor
from heron.residency.backend import select_backend
from heron.residency.coordinator import Coordinator
from heron.residency.process_group import ManagedProcessGroup
from heron.residency.state import Holdings, Residency

TRAINER_GROUP = "trainer"


@dataclass(frozen=True)
class ResidencySettings:
    colocate: bool
    offload_train: bool
    offload_rollout: bool
    wait_timeout_s: float = 600.0
    process_group_backend: str | None = None  # for the trainer's group when torch.distributed is up


def own_storages(inventory) -> int:
    """Gives every tensor backed by a non-resizable storage (memory-mapped by ``from_pretrained`` in
    a module that ``heron.device.place`` did not place, or from numpy) its own ordinary storage, in
    place (``tensor.data = clone``: the same Parameter/buffer objects stay), so the host-offload
    backend can free it. Returns how many."""
    return sum(copy_if_mapped(tensor, local_tensor(tensor)) for tensors in inventory.values() for tensor in tensors)


def attach(component, name: str, holdings: Holdings, *, offload: bool,
           coordinator: Coordinator, wait_timeout_s: float) -> Residency:
    """Attaches a residency to ``component`` for what it ``holdings`` declares (the backend it
    names, else one chosen from its device); with offload it then rests asleep."""
    device = torch.device(holdings.device)
    backend = holdings.backend(offload) if holdings.backend is not None else select_backend(device, offload, tag=name)
    residency = Residency(name, holdings, backend, device=device, wait_timeout_s=wait_timeout_s)
    coordinator.register(residency)
    if getattr(residency.backend, "adopts_storages", False):  # torch_memory_saver: into its weights region
        residency.backend.adopt(holdings.inventory())
    elif not residency.backend.keeps_memory:
        own_storages(holdings.inventory())
    component.residency = residency
    residency.sleep()  # no-op without offload
    return residency


def attach_residency(trainer, engine, settings: ResidencySettings) -> Coordinator:
    """Gives the trainer and the engine their residency from what each declares it holds
    (``holdings()``); returns the coordinator (metrics)."""
    coordinator = Coordinator(settings.colocate)
    trainer_holdings = trainer.holdings()
    if dist.is_initialized():
        group = ManagedProcessGroup("trainer", TRAINER_GROUP, backend=settings.process_group_backend)
        trainer_holdings = replace(trainer_holdings, process_groups={TRAINER_GROUP: group})
    attach(trainer, "trainer", trainer_holdings, offload=settings.offload_train,
           coordinator=coordinator, wait_timeout_s=settings.wait_timeout_s)
    attach(engine, "engine", engine.holdings(), offload=settings.offload_rollout,
           coordinator=coordinator, wait_timeout_s=settings.wait_timeout_s)
    return coordinator
