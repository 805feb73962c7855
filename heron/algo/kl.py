"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi.

With r = pi_ref(x) / pi(x), i.e. log r = logp_ref - logp (Schulman, "Approximating
KL Divergence", 2020):

- k1 = -log r = logp - logp_ref. Unbiased, but high variance and can be negative
  per token. The usual choice for a KL penalty folded into the reward.
- k3 = r - log r - 1 = exp(logp_ref - logp) - (logp_ref - logp) - 1. Unbiased,
  lower variance, and >= 0 per token. The estimator GRPO adds to its loss.
"""

from typing import Literal

import torch

KLEstimator = Literal["k1", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k3")


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator
) -> torch.Tensor:
    """Per-token KL estimate, same shape as the inputs (e.g. [B, T])."""
    log_ratio = ref_logprobs - logprobs  # [B, T], log r
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio  # expm1: exact near r = 1
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}")
