"""Loss aggregation (``algo.loss_agg``): how per-token loss terms l_it become one number.

Shapes: B = sequences, T = tokens; m_it = loss mask, n_i = sum_t m_it, B' = number of
sequences with n_i > 0, L = a constant length (rollout.max_new_tokens).

    token-mean               sum_it m_it l_it / sum_it m_it           (DAPO, Yu et al. 2025: every token weighs the same)
    seq-mean-token-mean      1/B' sum_i (sum_t m_it l_it / n_i)       (GRPO as written, Shao et al. 2024; GSPO)
    seq-mean-token-sum       1/B' sum_i sum_t m_it l_it               (a sequence's loss is its token sum)
    seq-mean-token-sum-norm  1/(B L) sum_it m_it l_it                 (Dr.GRPO, Liu et al. 2025: a constant normaliser)

All four are ``sum_it (m_it * w_i) * l_it / Z``: a per-sequence weight w_i that depends on
the sequence only (1, or 1/n_i) and one normaliser Z for the whole optimizer mini-batch
(never the micro-batch). The trainer computes Z once per mini-batch (all-reduced over
data-parallel ranks) and passes it to every micro-batch, so micro-batch losses add up to
the mini-batch loss and gradient accumulation is exact in every mode.

Diagnostics (clip fraction, drift KL, entropy) use the same token weights m_it * w_i but
their own normaliser ``metric = sum_it m_it w_it``, so they stay weighted means (a clip
*fraction* under every mode); ``LossNormalizer.to_metric`` converts a loss-normalised sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heron.algo.catalog import LOSS_AGGREGATIONS


@dataclass(frozen=True)
class LossNormalizer:
    """The two divisors of one optimizer mini-batch (see module docstring)."""

    loss: float
    """Z: every loss term of every micro-batch is a weighted token sum divided by this."""
    metric: float
    """sum of the token weights: diagnostics are weighted sums divided by this."""

    def to_metric(self, value: torch.Tensor) -> torch.Tensor:
        """A sum normalised by ``loss`` -> the same sum normalised by ``metric``."""
        return value if self.loss == self.metric else value * (self.loss / self.metric)


def _check(mode: str) -> None:
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(LOSS_AGGREGATIONS)}")


def token_weights(loss_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """m_it * w_i, [B, T]. token-mean and the token-sum modes return ``loss_mask`` itself."""
    _check(mode)
    if mode != "seq-mean-token-mean":
        return loss_mask
    lengths = loss_mask.to(torch.float32).sum(dim=-1, keepdim=True)  # [B, 1]
    return loss_mask / lengths.clamp_min(1.0)  # [B, T]; empty rows stay 0


def denominators(loss_mask: torch.Tensor, mode: str, max_response_tokens: int = 0) -> tuple[float, float]:
    """(loss, metric) sums over the rows of one (share of a) mini-batch, before the
    data-parallel all-reduce. loss_mask: [B, T]."""
    _check(mode)
    num_tokens = float(loss_mask.sum())
    num_sequences = float((loss_mask.sum(dim=-1) > 0).sum())
    if mode == "token-mean":
        return num_tokens, num_tokens
    if mode == "seq-mean-token-sum":
        return num_sequences, num_tokens
    if mode == "seq-mean-token-mean":
        return num_sequences, num_sequences
    if max_response_tokens < 1:
        raise ValueError("seq-mean-token-sum-norm needs max_response_tokens >= 1 (rollout.max_new_tokens)")
    return float(loss_mask.shape[0] * max_response_tokens), num_tokens


def normalizer(loss_sum: float, metric_sum: float, world_size: int = 1) -> LossNormalizer:
    """From all-reduced sums: max(sum, 1) / world_size (ranks average their gradients)."""
    return LossNormalizer(max(loss_sum, 1.0) / world_size, max(metric_sum, 1.0) / world_size)
