"""Advantage whitening over the valid tokens of a batch, as PPO implementations do after GAE
(the OpenAI baselines PPO2 / InstructGPT recipe; verl's ``masked_whiten``, OpenRLHF).

Shapes: B = sequences, T = tokens; m_t = loss mask (1 on the policy's tokens).

    mu      = sum_t m_t A_t / sum_t m_t
    var     = sum_t m_t (A_t - mu)^2 / (sum_t m_t - 1)      (unbiased, Bessel's correction)
    A'_t    = (A_t - mu) / sqrt(var + eps)                   on m_t = 1, 0 elsewhere

Every valid token counts once, so long responses weigh more than short ones (the token-level
PPO convention; heron's sequence-level estimators normalise over sequences instead).
"""

from __future__ import annotations

import torch

from heron.algo.masked import masked_mean, masked_sum


@torch.no_grad()
def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked tokens; 0 where mask is 0. x, mask [B, T].
    A single valid token has no variance: it whitens to 0."""
    kept = mask.bool()  # [B, T]
    count = kept.sum()
    mean = masked_mean(x, kept)
    centered = torch.where(kept, x - mean, torch.zeros((), dtype=x.dtype))  # [B, T]
    if count < 2:
        return centered * 0
    var = masked_sum(centered.square(), kept) / (count - 1)
    return centered * torch.rsqrt(var + eps)
