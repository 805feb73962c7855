"""Attaches residency to the run's components from outside: what each one holds on its
device (by category), which modules and optimizers to guard, which backend releases it, and
the coordinator that makes colocated components take turns.

A component with offload enabled *rests asleep*: it is awake only inside its declared
operations (each scope restores the previous state, asleep), so the loop never calls
``sleep``/``wake``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

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


def _params(*modules: torch.nn.Module | None) -> list[torch.Tensor]:
    return [p for m in modules if m is not None for p in m.parameters()]


def trainer_holdings(trainer, process_groups: dict[str, ManagedProcessGroup]) -> Holdings:
    """params, grads, optimizer state, buffers and the frozen reference model of a PolicyTrainer."""

    def inventory():
        params = _params(trainer.model)
        return {
            "params": params,
            "grads": [p.grad for p in params if p.grad is not None],
            "optimizer": [
                v for state in trainer.optimizer.state.values() for v in state.values() if torch.is_tensor(v)
            ],
            "buffers": list(trainer.model.buffers()),
            "reference": _params(trainer.reference)
            + (list(trainer.reference.buffers()) if trainer.reference is not None else []),
        }

    modules = [("model", trainer.model)] + ([("reference", trainer.reference)] if trainer.reference is not None else [])
    return Holdings(inventory, modules, [trainer.optimizer], process_groups)


def engine_holdings(engine) -> Holdings:
    """Weights and buffers of an EmbeddedEngine. Its KV cache lives only inside ``generate``
    (one DynamicCache per batch, freed on return), so at rest it holds 0 bytes of cache.
    An engine that keeps its memory elsewhere (a server) describes its own holdings."""
    if hasattr(engine, "residency_holdings"):
        return engine.residency_holdings()

    def inventory():
        return {"params": _params(engine.model), "buffers": list(engine.model.buffers()), "kv_cache": []}

    return Holdings(inventory, [("model", engine.model)])


def own_storages(inventory) -> int:
    """Gives every tensor backed by a non-resizable storage (memory-mapped by ``from_pretrained``,
    or from numpy) its own ordinary storage, in place (``tensor.data = clone``: the same
    Parameter/buffer objects stay), so the host-offload backend can free it. Returns how many."""
    num_moved = 0
    with torch.no_grad():
        for tensors in inventory.values():
            for tensor in tensors:
                if not local_tensor(tensor).untyped_storage().resizable():
                    tensor.data = tensor.data.clone()
                    num_moved += 1
    return num_moved


def attach(component, name: str, holdings: Holdings, *, offload: bool, device: torch.device,
           coordinator: Coordinator, wait_timeout_s: float) -> Residency:
    """Attaches a residency to ``component``; with offload it then rests asleep."""
    own = getattr(component, "residency_backend", None)  # a server engine releases memory in its server
    backend = own(offload) if own is not None else select_backend(device, offload, tag=name)
    residency = Residency(name, holdings, backend, device=device, wait_timeout_s=wait_timeout_s)
    coordinator.register(residency)
    if not residency.backend.keeps_memory:
        own_storages(holdings.inventory())
    component.residency = residency
    residency.sleep()  # no-op without offload
    return residency


def attach_residency(trainer, engine, settings: ResidencySettings) -> Coordinator:
    """Gives the trainer and the engine their residency; returns the coordinator (metrics)."""
    coordinator = Coordinator(settings.colocate)
    groups = {}
    if dist.is_initialized():
        groups[TRAINER_GROUP] = ManagedProcessGroup("trainer", TRAINER_GROUP, backend=settings.process_group_backend)
    attach(trainer, "trainer", trainer_holdings(trainer, groups), offload=settings.offload_train,
           device=trainer.device, coordinator=coordinator, wait_timeout_s=settings.wait_timeout_s)
    attach(engine, "engine", engine_holdings(engine), offload=settings.offload_rollout,
           device=engine.device, coordinator=coordinator, wait_timeout_s=settings.wait_timeout_s)
    return coordinator
