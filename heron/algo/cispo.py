"""CISPO: Clipped IS-weight Policy Optimization (MiniMax-M1, MiniMax 2025, arXiv 2506.13585).

Shapes: B = sequences, T = tokens.

PPO's clip drops the gradient of every token whose ratio left the trust region; in long
reasoning those are often the rare "fork" tokens (however, wait, ...) that matter most.
CISPO keeps every token's gradient and clips the importance-sampling *weight* instead:

    r_t   = pi_theta(y_t) / pi_old(y_t)
    ^r_t  = clip(r_t, 1 - eps_low, 1 + eps_high)
    J     = 1 / sum_i |o_i| * sum_i sum_t sg(^r_t) * A_t * log pi_theta(y_t)     (paper, eq. 4)

sg = stop-gradient: the weight scales the REINFORCE gradient -^r_t A_t grad log pi_theta,
it is not differentiated. The paper's normaliser is the batch's token count: token-mean.
MiniMax-M1 sets no lower bound in practice (eps_low large: ``algo.clip_low=1`` allows it
here) and tunes only eps_high.

heron writes the per-token loss as l_t = -sg(^r_t / r_t) * r_t * A_t: its gradient is
-sg(^r_t / r_t) * r_t * A_t * grad log pi = -^r_t A_t grad log pi, the paper's exactly,
and its value -^r_t A_t is the clipped surrogate (comparable with PPO's pg_loss), where
the paper's form has the value -^r_t A_t log pi.
"""

from __future__ import annotations

import torch

from heron.algo.kl import kl_penalty
from heron.algo.masked import masked_sum
from heron.algo.policy_loss import PolicyLossOutput, default_normalizer, log_ratio, sequence_advantages


def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    normalizer: float | torch.Tensor | None = None,
    max_log_ratio: float = 20.0,
) -> PolicyLossOutput:
    """loss = sum_t m_t * l_t / normalizer, l_t = -sg(clip(r_t) / r_t) * r_t * A_t.

    logprobs, old_logprobs, loss_mask: [B, T]; advantages: [B] or [B, T]. 0 <= clip_low <= 1
    (1: no lower bound), clip_high >= 0. clip_fraction counts tokens whose weight was clipped.
    """
    if not 0.0 <= clip_low <= 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low <= 1 and clip_high >= 0, got {clip_low=}, {clip_high=}")
    advantages = sequence_advantages(advantages)  # [B, 1] or [B, T]
    if normalizer is None:
        normalizer = default_normalizer(loss_mask, logprobs.dtype)
    ratio = torch.exp(log_ratio(logprobs, old_logprobs, max_log_ratio))  # [B, T]
    weight = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T], ^r_t (no gradient)
    scale = torch.where(weight == ratio.detach(), torch.ones_like(weight), weight / ratio.detach())  # [B, T], ^r / r
    per_token_loss = -scale * ratio * advantages  # [B, T]
    loss = masked_sum(per_token_loss, loss_mask) / normalizer
    with torch.no_grad():
        is_clipped = (weight != ratio).to(logprobs.dtype)  # [B, T]
        drift_kl = kl_penalty(old_logprobs.detach(), logprobs, "k3")  # [B, T]
        return PolicyLossOutput(
            loss,
            clip_fraction=masked_sum(is_clipped, loss_mask) / normalizer,
            approx_kl=masked_sum(drift_kl, loss_mask) / normalizer,
            ratio_mean=masked_sum(ratio, loss_mask) / normalizer,
        )
