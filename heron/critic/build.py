"""Building the critic from its own config sections (``CriticSpec``): the same function runs in
this process (local executor) and inside the critic's actor (Ray executor)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heron.config.critic import CriticConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.critic.critic import Critic


@dataclass(frozen=True)
class CriticSpec:
    """What building a critic needs, and nothing more (shipped to the critic's actor)."""

    critic: CriticConfig
    model: ModelConfig
    """``model.path`` is the backbone unless ``critic.path`` names another folder; ``model.dtype``."""
    train: TrainConfig
    """What the critic shares with the policy: its batching (steps_per_rollout, micro_batch_size,
    max_tokens_per_micro_batch), on_nonfinite, precision and gradient_checkpointing."""
    seed: int
    """``run.seed``: an actor seeds torch with it before building (as the driver does)."""


def build_critic(spec: CriticSpec) -> Critic:
    from heron.critic.value_model import load_value_model

    torch.manual_seed(spec.seed)
    model = load_value_model(spec.critic.path or spec.model.path, spec.model.dtype)
    if spec.train.gradient_checkpointing:
        from heron.trainer.activation_checkpointing import enable_activation_checkpointing

        enable_activation_checkpointing(model.backbone)
    return Critic(model, spec.critic, steps_per_rollout=spec.train.steps_per_rollout,
                  micro_batch_size=spec.train.micro_batch_size, on_nonfinite=spec.train.on_nonfinite,
                  max_tokens_per_micro_batch=spec.train.max_tokens_per_micro_batch, precision=spec.train.precision)
