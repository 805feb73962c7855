"""PPO clipped-surrogate policy loss, and what every policy loss returns.

Shapes: B = sequences in the micro-batch, T = tokens per sequence.

Changes from PPO (Schulman et al. 2017) as used for LLMs:

- Asymmetric clip range [1 - clip_low, 1 + clip_high] ("clip-higher", DAPO, Yu et
  al. 2025); clip_low = clip_high = 0.2 is plain PPO.
- Dual-clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL",
  arXiv 1912.09729): for A < 0 the clipped surrogate -min(r A, clip(r) A) = r |A| grows
  without bound in r; dual-clip caps it at c |A| (``clip_ratio_c`` = c > 1; 0 = off), so
  a token the policy has become far more likely on cannot dominate the batch.
- The log-ratio is clamped to [-max_log_ratio, max_log_ratio] before exp (20, as verl):
  stale or mismatched old logprobs (``train.recompute_old_logprobs=false``) can make
  logp - old_logp huge, and exp of it inf (inf * 0 = nan). Clamped tokens get no gradient.

Aggregation is not this function's business: every loss is
``sum_t loss_mask_t * l_t / normalizer``, where ``loss_mask`` may hold per-token weights
and ``normalizer`` is the whole mini-batch's (``heron.algo.loss_agg``). With the default
token-mean, loss_mask is 0/1 and normalizer the mini-batch's token count: the micro-batch
losses then sum to the full-batch loss, and gradient accumulation gives exactly the
full-batch gradient. The diagnostics use the same weights and normalizer so they also sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    """More detached diagnostics of the same kind (weighted sum / normalizer), logged as train/<name>."""


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, max_log_ratio: float) -> torch.Tensor:
    """log(pi_theta / pi_old), clamped to [-max_log_ratio, max_log_ratio] when max_log_ratio > 0. [B, T]."""
    delta = logprobs - old_logprobs.detach()  # [B, T]
    return delta.clamp(-max_log_ratio, max_log_ratio) if max_log_ratio > 0 else delta


def sequence_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """[B] or [B, T] -> [B, 1] or [B, T], detached: broadcastable over tokens."""
    advantages = advantages.detach()
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def default_normalizer(loss_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return loss_mask.to(dtype).sum().clamp_min(1.0)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    normalizer: float | torch.Tensor | None = None,
    clip_ratio_c: float = 0.0,
    max_log_ratio: float = 20.0,
) -> PolicyLossOutput:
    """loss = sum_t m_t * l_t / normalizer, with per token

        ratio_t = exp(clamp(logp_t - old_logp_t, -max_log_ratio, max_log_ratio))
        l_t = -min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)
        l_t = min(l_t, clip_ratio_c * |A_t|)   where A_t < 0, if clip_ratio_c > 0 (dual-clip)

    logprobs, old_logprobs, loss_mask: [B, T] (loss_mask 0/1 or token weights); advantages:
    [B] (one per sequence, broadcast over tokens) or [B, T]. normalizer defaults to
    max(mask.sum(), 1); pass the mini-batch's when accumulating over micro-batches.
    """
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low=}, {clip_high=}")
    if clip_ratio_c and clip_ratio_c <= 1.0:
        raise ValueError(f"dual-clip needs clip_ratio_c > 1 (or 0 to disable), got {clip_ratio_c}")
    advantages = sequence_advantages(advantages)  # [B, 1] or [B, T]
    if normalizer is None:
        normalizer = default_normalizer(loss_mask, logprobs.dtype)
    old_logprobs = old_logprobs.detach()
    ratio = torch.exp(log_ratio(logprobs, old_logprobs, max_log_ratio))  # [B, T]
    unclipped = ratio * advantages  # [B, T]
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages  # [B, T]
    per_token_loss = -torch.minimum(unclipped, clipped)  # [B, T]
    extra = {}
    if clip_ratio_c:
        cap = -clip_ratio_c * advantages  # [B, T] or [B, 1]: c |A| where A < 0
        dual = (advantages < 0) & (per_token_loss > cap)  # [B, T]
        per_token_loss = torch.where(dual, cap.expand_as(per_token_loss), per_token_loss)
        extra["dual_clip_fraction"] = masked_sum(dual.to(logprobs.dtype), loss_mask) / normalizer
    loss = masked_sum(per_token_loss, loss_mask) / normalizer
    with torch.no_grad():
        is_clipped = (clipped < unclipped).to(logprobs.dtype)  # [B, T]
        drift_kl = kl_penalty(old_logprobs, logprobs, "k3")  # [B, T]; tokens were sampled from pi_old
        clip_fraction = masked_sum(is_clipped, loss_mask) / normalizer
        approx_kl = masked_sum(drift_kl, loss_mask) / normalizer
        ratio_mean = masked_sum(ratio, loss_mask) / normalizer
    return PolicyLossOutput(loss, clip_fraction, approx_kl, ratio_mean, {k: v.detach() for k, v in extra.items()})
