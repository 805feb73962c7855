"""Model and optimizer state through torch.distributed.checkpoint (DCP).

DCP writes a world-size-independent format (``.distcp`` shards + ``.metadata``), so a
checkpoint saved by one process loads into any number of ranks and back (resharding on load).
State dicts come from ``torch.distributed.checkpoint.state_dict`` (keys are parameter names,
also for the optimizer), which works for plain, DDP and FSDP2 modules alike.

Hazards:
- ``get_model_state_dict`` / ``get_optimizer_state_dict`` return tensors that *share memory*
  with the live parameters: an async save must ``stage`` (copy) them before training resumes.
- DCP's ``.metadata`` file is a pickle. heron only hands a checkpoint to DCP after its manifest
  checksums verified, i.e. only files heron itself wrote; do not load checkpoints you did not write.
- Without a process group DCP runs single-process (``no_dist``). With one, saves use a
  dedicated gloo group: async saves on the default group deadlock or abort (notes-cpu.md).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

DCP_FOLDER = "dcp"


def live_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` keyed by parameter names; tensors share the live storage."""
    state: dict[str, Any] = {"model": get_model_state_dict(model)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    return state


def stage(state: Any) -> Any:
    """A host copy of ``state`` (tensors copied, pinned when CUDA is present; the rest deep-copied)
    that training can no longer change. Tensors that share storage stay shared in the copy."""
    memo: dict[tuple, torch.Tensor] = {}
    pin = torch.cuda.is_available()

    def copy_tensor(t: torch.Tensor) -> torch.Tensor:
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))  # tied tensors: one copy
        if key not in memo:
            host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=pin)
            memo[key] = host.copy_(t.detach())
        return memo[key]

    def walk(node: Any) -> Any:
        if isinstance(node, torch.Tensor):
            return copy_tensor(node)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(v) for v in node)
        return copy.deepcopy(node)

    return walk(state)


def save(state: dict[str, Any], folder: Path, process_group: dist.ProcessGroup | None = None) -> None:
    """Writes ``state`` as DCP files into ``folder/dcp`` with every file fsync'd."""
    writer = dcp.FileSystemWriter(str(Path(folder) / DCP_FOLDER), sync_files=True)
    dcp.save(state, storage_writer=writer, process_group=process_group, no_dist=process_group is None)


def _load(state: dict[str, Any], folder: Path, process_group: dist.ProcessGroup | None) -> None:
    reader = dcp.FileSystemReader(str(Path(folder) / DCP_FOLDER))
    dcp.load(state, storage_reader=reader, process_group=process_group, no_dist=process_group is None)


def load_into(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, folder: Path,
              process_group: dist.ProcessGroup | None = None) -> None:
    """Loads model (and optimizer) state from ``folder`` into the live objects, in place."""
    state = live_state(model, optimizer)
    _load(state, folder, process_group)
    set_model_state_dict(model, state["model"])
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])


def save_process_group() -> dist.ProcessGroup | None:
    """None in a single process; else a new gloo group used only by checkpoint I/O (collective:
    every rank must call it, in the same order)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo")
