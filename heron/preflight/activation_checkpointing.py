"""``train.gradient_checkpointing`` checked against the model before it loads: a model class
without transformers' checkpointing support would otherwise fail after its weights loaded."""

from __future__ import annotations

from heron.config.base import ConfigError
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig


def check_activation_checkpointing(train: TrainConfig, model: ModelConfig) -> None:
    if not train.gradient_checkpointing:
        return
    from heron.preflight.meta_model import meta_model
    from heron.trainer.activation_checkpointing import supports_activation_checkpointing

    built = meta_model(model.path)
    if not supports_activation_checkpointing(built):
        raise ConfigError(
            f"train.gradient_checkpointing=true: {type(built).__name__} (model.path {model.path}) does not support "
            f"activation checkpointing in transformers; set train.gradient_checkpointing=false"
        )
