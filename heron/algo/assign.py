"""The advantages stage: applies an advantage estimator to the whole rollout batch at once and
writes ``Sample.advantage``.

The estimator (built-in or ``hooks.advantage``) gets rewards [G, N]: one row per group, in
batch order, so batch-level statistics (REINFORCE++'s global normalisation) are possible.
All groups of a batch must have the same size N. heron's generate stage always makes
``rollout.samples_per_prompt`` samples per prompt and dynamic sampling drops whole groups,
so this holds unless a data source or generate hook makes ragged groups; that is refused
with a one-line error rather than padded (a padded row would bias batch statistics).

With ``algo.kl_in_reward`` the estimator sees r_i - kl_coef * KL_i (``heron.algo.kl``,
``sequence_kl``); ``Sample.reward`` keeps the task reward.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from heron.records import RolloutBatch

AdvantageEstimator = Callable[[torch.Tensor], torch.Tensor]  # [num_groups, group_size] -> same


def batch_rewards(batch: RolloutBatch) -> torch.Tensor:
    """The batch's rewards as [G, N]; one-line error if the groups differ in size."""
    sizes = [len(g.samples) for g in batch.groups]
    if len(set(sizes)) != 1:
        ragged = next(g for g in batch.groups if len(g.samples) != sizes[0])
        raise ValueError(
            f"rollout {batch.rollout_id}: advantages need groups of equal size, but prompt {batch.groups[0].prompt.prompt_id} "
            f"has {sizes[0]} samples and prompt {ragged.prompt.prompt_id} {len(ragged.samples)}; make every group "
            f"rollout.samples_per_prompt samples (drop whole groups, not single samples)"
        )
    return torch.tensor([g.rewards for g in batch.groups], dtype=torch.float32)  # [G, N]


def assign_advantages(
    batch: RolloutBatch, estimator: AdvantageEstimator, reward_penalties: Sequence[float] | None = None
) -> RolloutBatch:
    """``reward_penalties``: one number per sample in batch order, subtracted from its reward
    before the estimator sees it (the KL-in-reward term, already scaled by kl_coef)."""
    rewards = batch_rewards(batch)  # [G, N]
    if reward_penalties is not None:
        rewards = rewards - torch.tensor(list(reward_penalties), dtype=torch.float32).view_as(rewards)
    advantages = estimator(rewards)  # [G, N]
    if not isinstance(advantages, torch.Tensor) or advantages.shape != rewards.shape:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantage estimator {estimator!r} returned {shape} for rewards of shape {tuple(rewards.shape)}; it must return the same shape")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError(f"advantage estimator {estimator!r} returned non-finite advantages for rollout {batch.rollout_id}")
    for sample, adv in zip(batch.samples, advantages.flatten().tolist()):
        sample.advantage = adv
    return batch
