"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, Qwen team, arXiv 2507.18071).

Shapes: B = sequences, T = tokens; y_i = the policy tokens of sequence i (loss_mask > 0).

PPO/GRPO weight each token by its own ratio pi_theta(y_t) / pi_old(y_t); GSPO argues the
unit of the reward is the sequence, so the importance ratio and the clipping should be too:

    s_i = (pi_theta(y_i | x) / pi_old(y_i | x)) ^ (1 / |y_i|)
        = exp( 1/|y_i| * sum_t log(pi_theta(y_it) / pi_old(y_it)) )    (length-normalised)
    J = 1/G * sum_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)

A sequence whose ratio leaves the clip range loses its gradient as a whole. The gradient of
an unclipped sequence is s_i A_i / |y_i| * sum_t grad log pi_theta(y_it): every token is
weighted equally, by the sequence's ratio.

Each token of sequence i carries the sequence's loss l_i = -min(...), so the paper's
1/G sum_i is ``algo.loss_agg=seq-mean-token-mean`` (the token mean of a constant row is the
constant; checked at config time). Advantages must be one per sequence ([B]). The paper's
clip range is far narrower than PPO's, because s_i is a geometric mean: eps_low = 3e-4,
eps_high = 4e-4 (``algo.clip_low`` / ``algo.clip_high``).

GSPO-token (the paper's variant for token-level advantages) equals GSPO when advantages are
per sequence, which is all heron produces today; it is not implemented separately.
"""

from __future__ import annotations

import torch

from heron.algo.kl import kl_penalty
from heron.algo.masked import masked_sum
from heron.algo.policy_loss import PolicyLossOutput, default_normalizer, log_ratio


def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    normalizer: float | torch.Tensor | None = None,
    max_log_ratio: float = 20.0,
) -> PolicyLossOutput:
    """loss = sum_it m_it * l_i / normalizer with l_i = -min(s_i A_i, clip(s_i) A_i) (module docstring).

    logprobs, old_logprobs, loss_mask: [B, T]; advantages: [B]. loss_mask may hold token
    weights (seq-mean-token-mean's 1/|y_i|); |y_i| counts the tokens with loss_mask > 0.
    """
    if advantages.dim() != 1:
        raise ValueError(f"gspo needs one advantage per sequence ([B]), got shape {tuple(advantages.shape)}")
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low=}, {clip_high=}")
    if normalizer is None:
        normalizer = default_normalizer(loss_mask, logprobs.dtype)
    advantages = advantages.detach()  # [B]
    tokens = loss_mask > 0  # [B, T]
    lengths = tokens.to(logprobs.dtype).sum(dim=-1).clamp_min(1.0)  # [B]
    token_log_ratio = log_ratio(logprobs, old_logprobs, 0.0)  # [B, T]
    seq_log_ratio = masked_sum(token_log_ratio, tokens, dim=-1) / lengths  # [B]
    if max_log_ratio > 0:
        seq_log_ratio = seq_log_ratio.clamp(-max_log_ratio, max_log_ratio)
    seq_ratio = torch.exp(seq_log_ratio)  # [B], s_i
    unclipped = seq_ratio * advantages  # [B]
    clipped = seq_ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages  # [B]
    seq_loss = -torch.minimum(unclipped, clipped)  # [B]
    loss = masked_sum(seq_loss.unsqueeze(-1).expand_as(logprobs), loss_mask) / normalizer

    with torch.no_grad():
        is_clipped = (clipped < unclipped).to(logprobs.dtype)  # [B]
        drift_kl = kl_penalty(old_logprobs.detach(), logprobs, "k3")  # [B, T]
        return PolicyLossOutput(
            loss,
            clip_fraction=masked_sum(is_clipped.unsqueeze(-1).expand_as(logprobs), loss_mask) / normalizer,
            approx_kl=masked_sum(drift_kl, loss_mask) / normalizer,
            ratio_mean=masked_sum(seq_ratio.unsqueeze(-1).expand_as(logprobs), loss_mask) / normalizer,
        )
