"""Builders shared by the lifecycle tests: a trainer + engine pair on the toy model with
residency attached (deep copies of an in-memory template: fast), and a fixed train batch."""

from __future__ import annotations

import copy

import torch

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import ResidencySettings, attach_residency
from heron.rollout.embedded import EmbeddedEngine
from heron.trainer.batch import TrainBatch
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer
from tests.tolerance import HANG_S


class Pair:
    def __init__(self, template, *, colocate: bool, offload: bool, kl_coef: float = 0.0):
        objective = PolicyObjective(AlgoConfig(kl_coef=kl_coef))
        reference = copy.deepcopy(template) if kl_coef > 0 else None
        self.trainer = PolicyTrainer(
            copy.deepcopy(template), TrainConfig(lr=1e-2, micro_batch_size=4), objective,
            total_steps=1000, reference=reference,
        )
        self.engine = EmbeddedEngine(
            copy.deepcopy(template).eval().requires_grad_(False), pad_token_id=template.config.pad_token_id
        )
        self.coordinator: Coordinator = attach_residency(
            self.trainer, self.engine, ResidencySettings(colocate, offload, offload, wait_timeout_s=HANG_S)
        )

    @property
    def components(self):
        return {"trainer": self.trainer, "engine": self.engine}


def train_batch(vocab_size: int, seed: int = 0, num_rows: int = 4, length: int = 10) -> TrainBatch:
    """Random tokens; the second half of each row is 'response' with a random advantage."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab_size, (num_rows, length), generator=gen)  # [B, L]
    attention_mask = torch.ones(num_rows, length, dtype=torch.long)  # [B, L]
    attention_mask[0, -3:] = 0
    loss_mask = torch.zeros(num_rows, length - 1)  # [B, L-1]
    loss_mask[:, length // 2 :] = 1
    loss_mask[0, -3:] = 0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"s{i}" for i in range(num_rows)],
        input_ids=input_ids, attention_mask=attention_mask, loss_mask=loss_mask,
        advantages=torch.randn(num_rows, generator=gen), old_logprobs=torch.zeros(num_rows, length - 1),
    )
