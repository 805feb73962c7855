"""Building a policy trainer from its own config sections (``TrainerSpec``): the same function
runs in this process (local executor) and inside every trainer rank actor (Ray executor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from heron.config.algo import AlgoConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer


@dataclass(frozen=True)
class TrainerSpec:
    """What building a policy trainer needs, and nothing more (shipped to every rank actor)."""

    model: ModelConfig
    train: TrainConfig
    algo: AlgoConfig
    policy_loss: str
    """``hooks.policy_loss`` path ('' = ``algo.loss``), loaded where the trainer is built: user code
    referenced by a file path does not pickle by reference."""
    total_steps: int
    """Optimizer steps of the whole run (the LR schedule's horizon)."""
    temperature: float
    """``rollout.temperature``: the trainer's logprobs use the sampling temperature."""
    max_response_tokens: int
    """``rollout.max_new_tokens``: the fixed length L of ``algo.loss_agg=seq-mean-token-sum-norm``."""
    seed: int
    """``run.seed``: a rank actor seeds torch with it before building (as the driver does)."""
    device: str = "auto"
    """``run.device`` (local) or ``cluster.device`` (Ray), resolved by ``heron.device`` where the trainer is built."""
    allow_emulated_bf16: bool = False
    """``run.allow_emulated_bf16``: bf16 settings on a CPU without bf16 run (else ``heron.device.check_bf16`` refuses)."""


def build_trainer(
    spec: TrainerSpec,
    parallelize: Callable[..., torch.nn.Module] | None = None,
    trainer_cls: type[PolicyTrainer] = PolicyTrainer,
) -> PolicyTrainer:
    """The policy trainer; ``parallelize(model, frozen=False) -> model`` (data parallelism,
    applied from outside by the cluster layer) runs before the optimizer is built, on the policy
    and, with ``frozen=True``, on a separately loaded KL reference."""
    from heron.device import check_bf16, place, resolve
    from heron.lora import AdaptersDisabled, apply_lora, engine_view
    from heron.models import load_model
    from heron.plugins.loader import load_hook
    from heron.preflight.device import component_bf16_requests
    from heron.trainer.activation_checkpointing import enable_activation_checkpointing
    from heron.trainer.compile import compile_decoder_layers

    policy_loss = load_hook("policy_loss", spec.policy_loss) if spec.policy_loss else None
    objective = PolicyObjective(spec.algo, policy_loss=policy_loss, max_response_tokens=spec.max_response_tokens)
    device = resolve(spec.device)
    check_bf16(component_bf16_requests(spec.model.dtype, spec.train.precision), device,
               allow_emulated=spec.allow_emulated_bf16)
    model = apply_lora(load_model(spec.model.path, spec.model.dtype), spec.model.lora)  # LoRA off: the model itself
    if spec.train.gradient_checkpointing:
        enable_activation_checkpointing(model)
    model = place(model, device)
    if spec.train.compile:
        compile_decoder_layers(model)  # on its device, before data parallelism wraps it
    # the reference serves the KL term of the loss or, with algo.kl_in_reward, of the reward (sequence_kl);
    # under LoRA it is the policy with its adapters off (the frozen base: no second copy)
    reference = None
    if spec.algo.kl_coef > 0 and spec.model.lora.enabled:
        reference = AdaptersDisabled(model)
    elif spec.algo.kl_coef > 0:
        reference = place(load_model(spec.model.path, spec.model.dtype), device)
        if parallelize:  # data-parallel ranks: sharded as the policy under FSDP2 (heron.parallel.data_parallel)
            reference = parallelize(reference, frozen=True)
    return trainer_cls(
        parallelize(model) if parallelize else model,
        spec.train,
        objective,
        total_steps=spec.total_steps,
        temperature=spec.temperature,
        reference=reference,
        engine_view=engine_view(spec.model.lora),
    )
