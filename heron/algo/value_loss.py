"""Clipped value loss of PPO's critic (the PPO2 baselines implementation; as in verl and TRL),
for PPO with a learned critic (``heron.critic``).

Shapes: B = sequences, T = tokens.

    V_clip = V_old + clip(V - V_old, -eps, eps)
    l_t    = 0.5 * max((V_t - R_t)^2, (V_clip_t - R_t)^2)

The clip keeps a value update near the values the advantages were computed with, like the
policy's trust region; where the clipped branch is the larger one, the token gets no gradient.
Aggregated like every loss term: sum_t m_t * l_t / normalizer (``heron.algo.loss_agg``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heron.algo.masked import masked_mean, masked_sum
from heron.algo.policy_loss import default_normalizer


@dataclass
class ValueLossOutput:
    loss: torch.Tensor
    """Differentiable scalar."""
    clip_fraction: torch.Tensor
    """Fraction of tokens where the clipped branch was selected and differs (no gradient there)."""


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip: float = 0.2,
    normalizer: float | torch.Tensor | None = None,
) -> ValueLossOutput:
    """loss = sum_t m_t * 0.5 * max((V - R)^2, (V_clip - R)^2) / normalizer. All inputs [B, T]; clip > 0."""
    if clip <= 0:
        raise ValueError(f"the value clip must be > 0, got {clip}")
    if normalizer is None:
        normalizer = default_normalizer(loss_mask, values.dtype)
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + (values - old_values).clamp(-clip, clip)  # [B, T]
    unclipped_error = (values - returns).square()  # [B, T]
    clipped_error = (clipped - returns).square()  # [B, T]
    per_token = 0.5 * torch.maximum(unclipped_error, clipped_error)  # [B, T]
    with torch.no_grad():
        is_clipped = (clipped_error > unclipped_error).to(values.dtype)
        clip_fraction = masked_sum(is_clipped, loss_mask) / normalizer
    return ValueLossOutput(masked_sum(per_token, loss_mask) / normalizer, clip_fraction)


@torch.no_grad()
def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over the masked tokens: 1 = the critic predicts the returns,
    0 = no better than their mean, < 0 worse. nan when the returns do not vary."""
    kept = mask.bool()
    residual = returns - values
    var_returns = masked_mean((returns - masked_mean(returns, kept)).square(), kept)
    var_residual = masked_mean((residual - masked_mean(residual, kept)).square(), kept)
    if float(var_returns) == 0.0:
        return float("nan")
    return float(1.0 - var_residual / var_returns)
