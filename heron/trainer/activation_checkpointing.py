"""Activation checkpointing of the policy (``train.gradient_checkpointing``).

Why: the trainer's activation memory grows with layers x micro-batch tokens, and on a GPU it,
not the weights, is what stops a long-sequence micro-batch from fitting. With checkpointing each
decoder layer keeps only its input in the forward and recomputes what it needs in the backward
(transformers' per-layer checkpointing over ``torch.utils.checkpoint``, non-reentrant, so it
needs no ``requires_grad`` inputs and works with LoRA's frozen embeddings and with FSDP2):

    saved activations ~ L x (B x T x hidden) + one layer's, instead of L x everything a layer saves
    cost ~ one more forward of the decoder layers per micro-batch

The recompute runs the same ops on the same inputs (the RNG state is restored for dropout), so
losses and gradients are bit-identical to the run without it (tests/unit/test_activation_checkpointing.py).
"""

from __future__ import annotations

import torch

from heron.lora import unwrap

CHECKPOINT_KWARGS = {"use_reentrant": False}


def supports_activation_checkpointing(model: torch.nn.Module) -> bool:
    return bool(getattr(unwrap(model), "supports_gradient_checkpointing", False))


def enable_activation_checkpointing(model: torch.nn.Module) -> torch.nn.Module:
    """Turns checkpointing on in every decoder layer (pre-flight has checked the model supports it)."""
    base = unwrap(model)  # under LoRA, the HF model inside peft's wrapper
    if not supports_activation_checkpointing(base):
        raise ValueError(f"{type(base).__name__} does not support activation checkpointing")
    enable = getattr(base, "activation_checkpointing_enable", None)  # the name in newer transformers
    if enable is not None:
        enable(activation_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    else:  # older transformers 5.x (the GPU machine's 5.17)
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    return model
