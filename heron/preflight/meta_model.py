"""The model of a folder built on the meta device from its config: its structure, for checks
that must run before any weight is read (LoRA targets, activation checkpointing)."""

from __future__ import annotations

import torch


def meta_model(path: str) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
