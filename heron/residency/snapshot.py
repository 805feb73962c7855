"""Host snapshot of a module's weights: what a trainer hands to engines without waking."""

from __future__ import annotations

import torch


@torch.no_grad()
def host_snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``state_dict`` name -> a host copy; tied names (one storage) share one copy."""
    return host_snapshot_of(module.state_dict())


@torch.no_grad()
def host_snapshot_of(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A host copy of a state dict (never aliasing the live tensors, so the owner may sleep or
    train on); tied names (one storage) share one copy."""
    copies: dict[tuple, torch.Tensor] = {}
    snapshot = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage()._cdata, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        snapshot[name] = copies[key]
    return snapshot
