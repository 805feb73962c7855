"""``WeightLayout``: the names and shapes a server's model expects in a weight push.

A server holds its weights out of heron's reach, so heron checks a push against the model folder
the server started from before anything is sent (the engine contract: a state that does not fit
raises ``ValueError`` before any weight changes). The layout is read from the folder's
safetensors headers (no tensor data is loaded) and its config: with ``tie_word_embeddings`` the
LM head is the embedding, so ``lm_head.weight`` and ``model.embed_tokens.weight`` are two names
of one tensor and either suffices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

TIED_ALIASES = {"lm_head.weight": "model.embed_tokens.weight"}


@dataclass(frozen=True)
class WeightLayout:
    shapes: dict[str, tuple[int, ...]]  # checkpoint name -> shape, as the folder stores it
    aliases: dict[str, str]  # other accepted name -> checkpoint name (tied weights)

    @classmethod
    def from_folder(cls, folder: str | Path) -> WeightLayout:
        folder = Path(folder)
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{folder}: no *.safetensors file; a server engine needs safetensors weights")
        shapes: dict[str, tuple[int, ...]] = {}
        for path in files:
            shapes.update(file_shapes(path))
        config = json.loads((folder / "config.json").read_text())
        aliases = {}
        if config.get("tie_word_embeddings", False):
            aliases = {a: n for a, n in TIED_ALIASES.items() if n in shapes and a not in shapes}
        return cls(shapes, aliases)

    def to_push(self, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors to write for ``state``, under checkpoint names, one per tensor. Raises
        ``ValueError`` (naming the key) on an unknown key, a wrong shape or a missing tensor."""
        targets = self.targets({name: tuple(tensor.shape) for name, tensor in state.items()})
        return {target: state[name] for name, target in targets.items() if target}

    def targets(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, str]:
        """Each sent name -> the checkpoint name it loads as ("" for an alias whose checkpoint
        name is sent too: the checkpoint's own name wins), for a push of tensors of ``shapes``.
        Raises ``ValueError`` (naming the key) on an unknown key, a wrong shape or a missing tensor."""
        chosen: dict[str, str] = {}  # checkpoint name -> the sent name that loads it
        for name, shape in shapes.items():
            target = self.aliases.get(name, name)
            if target not in self.shapes:
                raise ValueError(f"load_weights: unknown key {name!r} (not in the served model's checkpoint)")
            if tuple(shape) != self.shapes[target]:
                raise ValueError(
                    f"load_weights: shape mismatch for {name!r}: got {tuple(shape)}, "
                    f"the served model has {self.shapes[target]}"
                )
            if target not in chosen or name == target:
                chosen[target] = name
        missing = sorted(set(self.shapes) - set(chosen))
        if missing:
            raise ValueError(f"load_weights: missing key {missing[0]!r} ({len(missing)} missing)")
        loads = {name: target for target, name in chosen.items()}
        return {name: loads.get(name, "") for name in shapes}


def file_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the safetensors file ``path``, from its header (no data is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
