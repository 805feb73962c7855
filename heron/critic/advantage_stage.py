"""The advantage stage of PPO with a learned critic (``algo.advantage=gae``): asks the critic for
V_t of every response token, then per token (formulas: ``heron.algo.gae``, ``heron.algo.whiten``)

    r_t = r_i - penalty_i at the last policy token of sample i, 0 elsewhere (outcome reward)
    A_t, R_t = GAE(r, V; gamma=algo.gamma, lambda=algo.lam)     R_t = A_t + V_t, the value targets
    A'_t = whiten(A) over all valid tokens of the batch

and writes them into the samples (``Sample.token_advantages``, ``.values``, ``.returns``; and
``Sample.advantage`` = the mean of its A'_t, for display). ``penalties``: the KL-in-reward term
per sample (``algo.kl_in_reward``), as for the per-sequence estimators.
"""

from __future__ import annotations

from typing import Sequence

import torch

from heron.algo.gae import gae_advantages, outcome_token_rewards
from heron.algo.masked import masked_mean
from heron.algo.whiten import masked_whiten
from heron.config.algo import AlgoConfig
from heron.critic.critic import Critic
from heron.records import RolloutBatch
from heron.trainer.batch import collate


def critic_advantages(batch: RolloutBatch, critic: Critic, pad_token_id: int, algo: AlgoConfig,
                      penalties: Sequence[float] | None = None) -> RolloutBatch:
    samples = batch.samples
    rewards = torch.tensor([r for g in batch.groups for r in g.rewards], dtype=torch.float32)  # [B]
    if penalties is not None:
        rewards = rewards - torch.tensor(list(penalties), dtype=torch.float32)
    rows = collate(samples, pad_token_id)
    values = critic.values(rows)  # [B, L-1]
    token_rewards = outcome_token_rewards(rewards, rows.loss_mask)  # [B, L-1]
    advantages, returns = gae_advantages(token_rewards, values, rows.loss_mask, gamma=algo.gamma, lam=algo.lam)
    advantages = masked_whiten(advantages, rows.loss_mask)  # [B, L-1]
    if not bool(torch.isfinite(advantages).all() and torch.isfinite(values).all()):
        raise ValueError(f"rollout {batch.rollout_id}: the critic's values or the GAE advantages are not finite")
    means = masked_mean(advantages, rows.loss_mask, dim=1)  # [B]
    for row, sample in enumerate(samples):
        start = len(sample.prompt_tokens) - 1  # response token j is scored at position p - 1 + j
        span = slice(start, start + len(sample.response_tokens))
        sample.token_advantages = advantages[row, span].tolist()
        sample.values = values[row, span].tolist()
        sample.returns = returns[row, span].tolist()
        sample.advantage = float(means[row])
    return batch
