from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc
from heron.config.lora import LoraConfig


@dataclass(frozen=True)
class ModelConfig:
    """The policy model: any local HF causal-LM folder (config, weights, tokenizer)."""

    path: str = doc("Local HF folder loaded with from_pretrained (model and tokenizer).", "")
    dtype: Literal["float32", "bfloat16"] = doc("Parameter dtype of trainer and engine.", "float32")
    lora: LoraConfig = doc("LoRA adapters (peft): train low-rank adapters, base weights frozen.", factory=LoraConfig)

    def __post_init__(self):
        check(self.path != "", "model.path is required: set model.path=<local HF model folder>")
