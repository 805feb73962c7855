"""``model.lora.target_modules`` checked against the model before it loads: a name that is not
one of its linear layers would otherwise be peft's "Target modules {...} not found in the base
model" after the weights loaded, or (a name matching nothing trainable) a run that trains
nothing. The model is built on the meta device from its config: no weights are read."""

from __future__ import annotations

from heron.config.base import ConfigError
from heron.config.lora import ALL_LINEAR
from heron.config.model import ModelConfig


def linear_layers(path: str) -> tuple[list[str], list[str]]:
    """(full names of the linear layers but the output head, the output head's names)."""
    import torch

    from heron.preflight.meta_model import meta_model

    model = meta_model(path)
    head = model.get_output_embeddings()
    layers, heads = [], []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            (heads if module is head else layers).append(name)
    return layers, heads


def _matches(target: str, name: str) -> bool:
    """peft's rule for a target name: the whole module name or its last dotted parts."""
    return name == target or name.endswith(f".{target}")


def check_lora_targets(cfg: ModelConfig) -> None:
    """One-line ``ConfigError`` when a target is not a linear layer of ``cfg.path``'s model (or is
    its output head, whose weight may be tied to the input embeddings)."""
    if not cfg.lora.enabled or cfg.lora.target_modules == [ALL_LINEAR]:
        return
    layers, heads = linear_layers(cfg.path)
    short = ", ".join(sorted({name.rsplit(".", 1)[-1] for name in layers}))
    for target in cfg.lora.target_modules:
        if any(_matches(target, name) for name in heads):
            raise ConfigError(f"model.lora.target_modules: {target} is the output head, which LoRA does not adapt here; use {short}")
        if not any(_matches(target, name) for name in layers):
            raise ConfigError(
                f"model.lora.target_modules: {target!r} is not a linear layer of the model at {cfg.path}; "
                f"its linear layers are {short} (or use [{ALL_LINEAR}])"
            )
