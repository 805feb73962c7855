"""The advantages stage: applies an advantage estimator group by group and writes
``Sample.advantage`` (groups may differ in size, e.g. after filtering)."""

from __future__ import annotations

from typing import Callable

import torch

from heron.records import RolloutBatch

AdvantageEstimator = Callable[[torch.Tensor], torch.Tensor]  # [num_groups, group_size] -> same


def assign_advantages(batch: RolloutBatch, estimator: AdvantageEstimator) -> RolloutBatch:
    for group in batch.groups:
        rewards = torch.tensor([group.rewards], dtype=torch.float32)  # [1, group_size]
        advantages = estimator(rewards)  # [1, group_size]
        if not isinstance(advantages, torch.Tensor) or advantages.shape != rewards.shape:
            shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
            raise ValueError(f"advantage estimator {estimator!r} returned {shape} for rewards of shape {tuple(rewards.shape)}; it must return the same shape")
        for sample, adv in zip(group.samples, advantages[0].tolist()):
            sample.advantage = adv
    return batch
