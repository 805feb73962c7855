"""Building the critic from its own config sections (``CriticSpec``): the same function runs in
this process (local executor) and inside the critic's actor (Ray executor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

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
    max_tokens_per_micro_batch), on_nonfinite, precision, gradient_checkpointing and compile."""
    seed: int
    """``run.seed``: an actor seeds torch with it before building (as the driver does)."""
    device: str = "auto"
    """``run.device`` (local) or ``cluster.device`` (Ray), resolved by heron.device where it is built."""
    allow_emulated_bf16: bool = False
    """``run.allow_emulated_bf16``: bf16 settings on a CPU without bf16 run (else ``heron.device.check_bf16`` refuses)."""
    total_steps: int = 1
    """Optimizer steps of the whole run (``rollout.num_rollouts x train.steps_per_rollout``): the
    length of a cosine ``critic.lr_schedule``."""


def build_critic(
    spec: CriticSpec,
    parallelize: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
    critic_cls: type[Critic] = Critic,
) -> Critic:
    """The critic on its device; ``parallelize(model) -> model`` (data parallelism, applied from
    outside by the cluster layer) runs before the optimizer is built."""
    from heron.critic.value_model import load_value_model
    from heron.device import check_bf16, place, resolve
    from heron.preflight.device import component_bf16_requests

    device = resolve(spec.device)
    check_bf16(component_bf16_requests(spec.model.dtype, spec.train.precision), device,
               allow_emulated=spec.allow_emulated_bf16)
    torch.manual_seed(spec.seed)
    model = load_value_model(spec.critic.path or spec.model.path, spec.model.dtype)
    if spec.train.gradient_checkpointing:
        from heron.trainer.activation_checkpointing import enable_activation_checkpointing

        enable_activation_checkpointing(model.backbone)
    model = place(model, device)
    if spec.train.compile:
        from heron.trainer.compile import compile_decoder_layers

        compile_decoder_layers(model.backbone)  # on its device, before data parallelism wraps it
    return critic_cls(parallelize(model) if parallelize else model, spec.critic,
                      steps_per_rollout=spec.train.steps_per_rollout, micro_batch_size=spec.train.micro_batch_size,
                      on_nonfinite=spec.train.on_nonfinite, max_tokens_per_micro_batch=spec.train.max_tokens_per_micro_batch,
                      precision=spec.train.precision, total_steps=spec.total_steps)
