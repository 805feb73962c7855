"""Correction for the mismatch between the rollout engine and the trainer.

Shapes: B = sequences, T = tokens.

The engine samples y ~ pi_engine, but the trainer's loss assumes pi_old, its own
recomputation of the same weights. Different kernels (vLLM/SGLang vs the training
framework, bf16 vs fp32, batch-dependent reductions) make the two differ per token, so
the update is off-policy even right after a weight push. With w_t = pi_old(y_t) /
pi_engine(y_t) (trainer recomputed / engine logprobs):

- "tis": truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework
  Secretly Brings You Off-Policy RL Training"): the token's policy loss is multiplied by
  min(w_t, C) (``algo.off_policy.tis_cap``), a constant (no gradient). Truncation bounds
  the variance at the cost of a little bias.
- "mis": masked importance sampling (IcePop, Ling team 2025; "MIS" in verl): tokens with
  w_t outside [low, high] (``algo.off_policy.mask_low`` / ``mask_high``) get weight 0,
  the others 1 -- tokens the two engines disagree on too much are left out of the
  gradient instead of being reweighted.

The weights multiply the policy loss only (not KL or entropy terms) and leave the loss
normaliser alone (a masked token counts as a zero term). Metrics: the fraction of tokens
the mode truncated or masked. The mismatch itself, mean and max |log w_t| over the rollout, is
logged for every mode by the trainer (``heron.trainer.logprob_mismatch``).
"""

from __future__ import annotations

import torch

from heron.algo.catalog import OFF_POLICY_MODES
from heron.algo.masked import masked_sum

MAX_LOG_WEIGHT = 20.0  # exp(20) ~ 5e8: finite; a token this far off is truncated or masked anyway


def engine_mismatch_weights(
    old_logprobs: torch.Tensor,
    engine_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    mode: str,
    tis_cap: float = 2.0,
    mask_low: float = 0.5,
    mask_high: float = 2.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(weights [B, T] or None for mode "none", metrics). All inputs [B, T]; no gradient.
    Metrics are masked sums / ``normalizer`` (default: this batch's token count; a data-parallel
    trainer passes its share of the global count, so the rank mean is the global mean)."""
    if mode not in OFF_POLICY_MODES:
        raise ValueError(f"unknown off-policy correction {mode!r}; valid: {', '.join(OFF_POLICY_MODES)}")
    if normalizer is None:
        normalizer = max(float(loss_mask.sum()), 1.0)
    with torch.no_grad():
        log_w = (old_logprobs - engine_logprobs).clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)  # [B, T]
        w = torch.exp(log_w)  # [B, T]
        if mode == "none":
            return None, {}
        if mode == "tis":
            weights = w.clamp(max=tis_cap)  # [B, T]
            beyond = masked_sum((w > tis_cap).to(w.dtype), loss_mask)
            metrics = {"mismatch/truncated_fraction": float(beyond) / normalizer}
        else:
            kept = (w >= mask_low) & (w <= mask_high)  # [B, T]
            weights = kept.to(w.dtype)
            metrics = {"mismatch/masked_fraction": float(masked_sum((~kept).to(w.dtype), loss_mask)) / normalizer}
        return weights, metrics
