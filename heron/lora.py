"""LoRA through ``peft``: the policy gets low-rank adapters, the base weights are frozen.

For a target linear layer with base weight ``W: [out, in]``, peft adds ``A: [r, in]`` (Kaiming
init) and ``B: [out, r]`` (zeros) and computes ``y = W x + (alpha / r) * B (A dropout(x))``.
Only A and B require gradients, so the optimizer (built over trainable parameters), its state,
the gradients and the checkpoint's DCP shards hold the adapters only; the base weights are the
``model.path`` weights, loaded again on resume and export.

Engines serve a plain model: ``merged_weights`` turns the trainer's state dict (peft names)
into the HF state dict of ``W' = W + (B @ A) * (alpha / r)``, the same operations in the same
order as peft's ``merge_and_unload`` (``get_delta_weight`` then ``W += delta`` in place), so the
merged weights are bit-identical to peft's -- with a bf16 base too, whose adapters peft keeps in
float32: the float32 delta is added into the bf16 weight and rounded once (tests/unit/test_lora_merge.py).
"""

from __future__ import annotations

import sys
import warnings
from typing import Callable

import torch

from heron.config.lora import ALL_LINEAR, LoraConfig

PEFT_PREFIX = "base_model.model."  # PeftModelForCausalLM -> LoraModel -> the HF model
ADAPTER = "default"  # peft's adapter name


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """``model`` with adapters on ``cfg.target_modules`` (a ``PeftModel``), or ``model`` itself
    when LoRA is off. Adapter init draws from torch's RNG (seeded by the caller)."""
    if not cfg.enabled:
        return model
    from peft import get_peft_model

    with warnings.catch_warnings():
        # peft reads transformers' deprecated alias (transformers 5); nothing a user can change
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, peft_config(cfg))


def peft_config(cfg: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig

    targets = ALL_LINEAR if cfg.target_modules == [ALL_LINEAR] else list(cfg.target_modules)
    return PeftLoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
        bias="none", task_type="CAUSAL_LM",
    )


def engine_view(cfg: LoraConfig) -> Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """What engines load, from the trainer's state dict: the merged weights with LoRA, else the
    state dict itself."""
    if not cfg.enabled:
        return _same
    return lambda state: merged_weights(state, cfg.scaling)


def _same(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return state


@torch.no_grad()
def merged_weights(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """HF names -> tensors of the merged model, from a peft state dict (``base_model.model.``
    names; ``<layer>.base_layer.weight``, ``<layer>.lora_A.default.weight``, ...). Untouched
    tensors pass through as the same objects (tied weights stay tied)."""
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        name = name.removeprefix(PEFT_PREFIX)
        if f".lora_A.{ADAPTER}." in name or f".lora_B.{ADAPTER}." in name:
            continue
        if ".base_layer." not in name:
            merged[name] = tensor
            continue
        layer, leaf = name.split(".base_layer.")
        if leaf != "weight":
            merged[f"{layer}.{leaf}"] = tensor  # the bias: LoRA leaves it alone
            continue
        a = state[f"{PEFT_PREFIX}{layer}.lora_A.{ADAPTER}.weight"]  # [r, in]
        b = state[f"{PEFT_PREFIX}{layer}.lora_B.{ADAPTER}.weight"]  # [out, r]
        weight = tensor.clone()
        delta = (b @ a) * scaling  # [out, in]; peft: transpose(B @ A, fan_in_fan_out) * scaling
        weight += delta  # in place: a float32 delta (peft keeps adapters float32) is added, then rounded once
        merged[f"{layer}.weight"] = weight
    return merged


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model inside a ``PeftModel`` (its config is the base model's), else ``model``.
    peft is imported only if already loaded: without it no model is a ``PeftModel``."""
    peft = sys.modules.get("peft")
    if peft is not None and isinstance(model, peft.PeftModel):
        return model.get_base_model()
    return model


class AdaptersDisabled(torch.nn.Module):
    """The frozen reference of a LoRA policy: the policy's own forward with its adapters
    disabled (peft's ``disable_adapter``). The base weights never change under LoRA, so this is
    the ``model.path`` model, without a second copy of it in memory. The policy is held outside
    the module tree: the view has no parameters of its own, and ``eval()`` or
    ``requires_grad_(False)`` on it leave the policy's training mode and adapters alone. Each
    forward runs the policy in eval mode (as a separate reference would) and restores its mode."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        object.__setattr__(self, "policy", policy)  # not a submodule (see above)

    @property
    def config(self):
        """The policy's model config: the reference is the same architecture (what the trainer's
        forward reads, e.g. the decoder layers a shared-prompt forward must route)."""
        return self.policy.config

    def get_output_embeddings(self) -> torch.nn.Module:
        """The policy's output head: the one this view's forward runs (through its adapter, if
        LoRA targets the head, disabled here), for heron.trainer.lm_head_chunks."""
        return self.policy.get_output_embeddings()

    def forward(self, *args, **kwargs):
        policy = self.policy
        training = policy.training
        trainable = [p for p in policy.parameters() if p.requires_grad]
        policy.eval()
        try:
            with policy.disable_adapter():
                # peft also turns the adapters' requires_grad off while they are disabled; FSDP2 reads it
                # at its first forward to choose what it reduces (bf16 gradients are reduced in float32
                # only for the parameters that train then). Disabled adapters stay out of the forward either way.
                for param in trainable:
                    param.requires_grad_(True)
                return policy(*args, **kwargs)
        finally:
            policy.train(training)
