"""Generalised advantage estimation (Schulman et al. 2016, "High-Dimensional Continuous
Control Using Generalized Advantage Estimation", arXiv 1506.02438), for PPO with a learned
critic (``algo.advantage=gae``; the advantage stage is ``heron.critic.advantage_stage``).

Shapes: B = sequences, T = tokens (positions of the response); m_t = loss mask (1 on the
policy's tokens, 0 on padding and on tool/environment tokens inside a response).

    delta_t = r_t + gamma * V_{t'} - V_t          t' = the next policy token after t (V = 0 past the last)
    A_t     = delta_t + gamma * lambda * A_{t'}
    R_t     = A_t + V_t                           (the value target)

Positions with m_t = 0 are skipped, not treated as steps: the next policy token's value and
advantage carry over them, so tool output inside a multi-turn response does not discount
or bootstrap (verl does the same). For LLM outcome rewards, r_t is the reward at the last
policy token and 0 elsewhere; gamma = lambda = 1 then gives A_t = r - V_t.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def gae_advantages(
    token_rewards: torch.Tensor, values: torch.Tensor, loss_mask: torch.Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [B, T], returns [B, T]), both 0 where loss_mask is 0. Inputs [B, T]."""
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"need gamma and lambda in [0, 1], got {gamma=}, {lam=}")
    kept = loss_mask.bool()  # [B, T]
    next_value = torch.zeros_like(values[:, 0])  # [B], V of the next policy token
    next_advantage = torch.zeros_like(values[:, 0])  # [B]
    advantages = torch.zeros_like(values)  # [B, T]
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        advantage = delta + gamma * lam * next_advantage  # [B]
        next_value = torch.where(kept[:, t], values[:, t], next_value)
        next_advantage = torch.where(kept[:, t], advantage, next_advantage)
        advantages[:, t] = torch.where(kept[:, t], advantage, torch.zeros_like(advantage))
    returns = torch.where(kept, advantages + values, torch.zeros_like(values))  # [B, T]
    return advantages, returns


def outcome_token_rewards(rewards: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Token rewards [B, T] of an outcome reward: r_i at the last policy token of row i, 0
    elsewhere (rows without a policy token get none). rewards [B], loss_mask [B, T]."""
    kept = loss_mask.bool()  # [B, T]
    positions = torch.arange(kept.shape[1]).expand_as(kept)  # [B, T]
    last = torch.where(kept, positions, torch.full_like(positions, -1)).amax(dim=1)  # [B]
    token_rewards = torch.zeros(kept.shape, dtype=rewards.dtype)  # [B, T]
    rows = torch.nonzero(last >= 0).squeeze(-1)
    token_rewards[rows, last[rows]] = rewards[rows]
    return token_rewards
