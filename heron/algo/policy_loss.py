"""PPO clipped-surrogate policy loss with token-level aggregation.

Shapes: B = sequences in the micro-batch, T = tokens per sequence.

Changes from PPO (Schulman et al. 2017) as used for LLMs:

- Asymmetric clip range [1 - clip_low, 1 + clip_high] ("clip-higher", DAPO, Yu et
  al. 2025); clip_low = clip_high = 0.2 is plain PPO.
- Token-level aggregation (DAPO; Dr.GRPO, Liu et al. 2025): the loss is a sum over
  all masked tokens divided by one normalizer, not a mean per sequence then a mean
  over sequences, so long sequences are not down-weighted token by token.

The normalizer defaults to this call's token count, mask.sum(). When the trainer
splits an optimizer mini-batch into micro-batches it passes the token count of
the whole mini-batch as `normalizer` to every micro-batch; the micro-batch losses
then sum to the full-batch loss, and gradient accumulation gives exactly the
full-batch gradient. The diagnostics use the same normalizer so they also sum.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from heron.algo.kl import kl_penalty
from heron.algo.masked import masked_sum


@dataclass
class PolicyLossOutput:
    """Loss and detached diagnostics, each a scalar sum over masked tokens / normalizer."""

    loss: torch.Tensor
    """Differentiable scalar to call backward() on."""
    clip_fraction: torch.Tensor
    """Fraction of tokens where the clipped term was selected and differs (no gradient there)."""
    approx_kl: torch.Tensor
    """k3 estimate of KL(pi_old || pi_theta): how far the policy drifted since rollout."""
    ratio_mean: torch.Tensor
    """Mean of pi_theta / pi_old over tokens."""


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    normalizer: float | torch.Tensor | None = None,
) -> PolicyLossOutput:
    """loss = sum_t m_t * l_t / normalizer, with per token

        ratio_t = exp(logp_t - old_logp_t)
        l_t = -min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)

    logprobs, old_logprobs, loss_mask: [B, T]; advantages: [B] (one per sequence,
    broadcast over tokens) or [B, T]. normalizer defaults to max(mask.sum(), 1); pass
    the mini-batch token count when accumulating over micro-batches (module docstring).
    """
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low=}, {clip_high=}")
    advantages = advantages.detach()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [B, 1]
    if normalizer is None:
        normalizer = loss_mask.to(logprobs.dtype).sum().clamp_min(1.0)
    old_logprobs = old_logprobs.detach()
    ratio = torch.exp(logprobs - old_logprobs)  # [B, T]
    unclipped = ratio * advantages  # [B, T]
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages  # [B, T]
    per_token_loss = -torch.minimum(unclipped, clipped)  # [B, T]
    loss = masked_sum(per_token_loss, loss_mask) / normalizer
    with torch.no_grad():
        is_clipped = (clipped < unclipped).to(logprobs.dtype)  # [B, T]
        drift_kl = kl_penalty(old_logprobs, logprobs, "k3")  # [B, T]; tokens were sampled from pi_old
        clip_fraction = masked_sum(is_clipped, loss_mask) / normalizer
        approx_kl = masked_sum(drift_kl, loss_mask) / normalizer
        ratio_mean = masked_sum(ratio, loss_mask) / normalizer
    return PolicyLossOutput(loss, clip_fraction, approx_kl, ratio_mean)


POLICY_LOSSES: dict[str, Callable[..., PolicyLossOutput]] = {"ppo_clip": ppo_clip_loss}
