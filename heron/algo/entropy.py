"""Entropy of the categorical distribution given by logits, computed stably."""

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) - sum_v softmax(z)_v * z_v = -sum_v p_v * log_softmax(z)_v.

    logits: [..., V], finite. Returns [...]. The second form is used: log_softmax
    subtracts max(z) first, so there is no overflow and no cancellation between two
    large terms (lse(z) ~ z_max) when logits are large.
    """
    return entropy_from_logprobs(torch.log_softmax(logits, dim=-1))


def entropy_from_logprobs(logprobs: torch.Tensor) -> torch.Tensor:
    """H = -sum_v exp(lp_v) * lp_v from a log-softmax lp [..., V] (shared with the token logprobs)."""
    return -(logprobs.exp() * logprobs).sum(dim=-1)
