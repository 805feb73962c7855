"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi.

With r = pi_ref(x) / pi(x), i.e. log r = logp_ref - logp (Schulman, "Approximating
KL Divergence", 2020):

- k1 = -log r = logp - logp_ref. Unbiased, but high variance and can be negative
  per token. The choice for a KL penalty folded into the reward (``algo.kl_in_reward``,
  as PPO-RLHF does: Ziegler et al. 2019, Ouyang et al. 2022).
- k2 = 0.5 * (log r)^2. Biased as a value, >= 0, low variance.
- k3 = r - log r - 1 = exp(logp_ref - logp) - (logp_ref - logp) - 1. Unbiased,
  lower variance, and >= 0 per token. The estimator GRPO adds to its loss.

As a *loss term* (``algo.kl_in_reward=false``: differentiated through logp on samples
from pi, on-policy) what matters is the expected gradient, not the value:

- k1: E_pi[grad logp] = 0, so k1 in the loss has zero expected gradient -- it does
  nothing but add noise. k1 belongs in the reward.
- k2: E_pi[(logp - logp_ref) grad logp] = grad KL(pi || pi_ref) exactly: the loss form
  whose gradient is the reverse KL's.
- k3: E_pi[(1 - r) grad logp] = -sum_x pi_ref grad logp = grad KL(pi_ref || pi): the
  gradient of the *forward* KL, a fine regulariser but not the reverse KL.
"""

from typing import Literal

import torch

from heron.algo.catalog import KL_ESTIMATORS
from heron.algo.masked import masked_sum

KLEstimator = Literal["k1", "k2", "k3"]


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator
) -> torch.Tensor:
    """Per-token KL estimate, same shape as the inputs (e.g. [B, T])."""
    log_ratio = ref_logprobs - logprobs  # [B, T], log r
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio  # expm1: exact near r = 1
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}")


def sequence_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, loss_mask: torch.Tensor, estimator: KLEstimator
) -> torch.Tensor:
    """KL_i = sum_t m_t * kl_t over each sequence's policy tokens: [B, T] -> [B].

    The sequence-level KL penalty of RLHF with outcome rewards: R_i = r_i - beta * KL_i
    treats the whole response as one action (Ahmadian et al. 2024, "Back to Basics",
    eq. 2: r(x, y) - beta * log(pi(y|x) / pi_ref(y|x)), which is KL_i with k1). It is
    the return at the first token of the per-token penalty -beta * kl_t of PPO-RLHF
    with gamma = 1; with one advantage per sequence (no critic) that is the correct
    form: every token of the response shares it.
    """
    return masked_sum(kl_penalty(logprobs, ref_logprobs, estimator), loss_mask, dim=-1)
