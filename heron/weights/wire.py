"""How weights cross a process boundary.

Ray moves numpy arrays zero-copy through its object store but pickles torch tensors
(~60x slower for 100 MB), so state dicts travel as ``{name: np.ndarray}``. The disk
transport writes one safetensors file per version instead and sends only its path
(``WeightFile``). Dtypes numpy lacks (bfloat16) travel as raw int16 bits and are viewed back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class WeightFile:
    """A pushed state dict on disk: a safetensors file written by ``save_weight_file``."""

    path: str
    version: int


@dataclass(frozen=True)
class Bf16Array:
    bits: np.ndarray  # int16 view of a bfloat16 tensor


def _is_state_dict(value: Any, kind: type) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, kind) for v in value.values())


def to_wire(value: Any) -> Any:
    """A tensor state dict -> numpy arrays; anything else unchanged."""
    if not _is_state_dict(value, torch.Tensor):
        return value
    out = {}
    for name, tensor in value.items():
        tensor = tensor.detach().cpu()
        out[name] = Bf16Array(tensor.view(torch.int16).numpy()) if tensor.dtype == torch.bfloat16 else tensor.numpy()
    return out


def from_wire(value: Any) -> Any:
    """Inverse of ``to_wire``; a ``WeightFile`` is loaded into a tensor state dict."""
    if isinstance(value, WeightFile):
        from safetensors.torch import load_file

        return load_file(value.path)
    if not _is_state_dict(value, (np.ndarray, Bf16Array)):
        return value
    return {
        name: torch.from_numpy(a.bits.copy()).view(torch.bfloat16) if isinstance(a, Bf16Array) else torch.from_numpy(a.copy())
        for name, a in value.items()
    }


def save_weight_file(state: dict[str, torch.Tensor], folder: str | Path, version: int) -> WeightFile:
    """Writes ``weights-v<version>.safetensors`` atomically (tmp + fsync + rename); tied
    tensors are written once (the engine accepts either alias). Older versions are removed."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    seen: set[int] = set()
    unique = {}
    for name, tensor in state.items():
        if tensor.untyped_storage().data_ptr() not in seen:
            seen.add(tensor.untyped_storage().data_ptr())
            unique[name] = tensor.contiguous()
    final = folder / f"weights-v{version:06d}.safetensors"
    tmp = final.with_suffix(".tmp")
    save_file(unique, str(tmp), metadata={"version": str(version)})
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for old in folder.glob("weights-v*.safetensors"):
        if old != final:
            old.unlink(missing_ok=True)
    return WeightFile(str(final), version)
