"""Rows the policy loss gives no gradient: the trainer skips their forward and backward.

GRPO-style advantages are 0 for every sample of a group whose rewards are all equal (all right
or all wrong), a large share of a batch once a task is half learned or still out of reach. Every
built-in policy loss is a sum over loss tokens of the advantage times a function of the ratio:

    L = sum_it w_it * A_it * f(r_it) / Z
    (ppo_clip: f = -min(r, clip(r)) by the sign of A, dual clip included; gspo: the sequence
    ratio; cispo: -sg(clip(r)) * log pi; the algo.off_policy weights scale w_it)

so a row with A_it = 0 on every loss token adds exactly 0 to the loss and to every gradient.
Leaving it out changes neither, provided the normaliser Z still counts it: the trainer computes Z
from the whole mini-batch before it selects the rows (heron.algo.loss_agg). It does not hold when
the loss has a term without A (algo.kl_coef > 0 with the KL in the loss, algo.entropy_coef > 0,
a hooks.policy_loss the trainer cannot inspect): those objectives say ``zero_advantage_idle =
False`` and every row trains.

The separate pi_old forward (``train.steps_per_rollout > 1``, ``algo.off_policy``) skips them too:
a row without an advantage never reads its pi_old.

What changes: the order of float sums (fewer rows per matmul), and the diagnostics (entropy, clip
fraction, drift KL, the engine-mismatch metrics and the algo.off_policy correction's) become means
over the trained rows. One row is kept when none has an advantage, so the optimizer
step still sees a (zero) gradient as before: AdamW decays its moments and applies weight decay
exactly as it would have.
"""

from __future__ import annotations

import torch


def rows_with_gradient(
    advantages: torch.Tensor,  # [B] per sequence, or [B, L-1] per token
    loss_mask: torch.Tensor,  # [B, L-1]
) -> list[int]:
    """Rows (in order) with a non-zero advantage on at least one loss position; at least one
    row, the one with the fewest loss tokens, when none has. NaN counts as non-zero, so a
    non-finite advantage still reaches the loss and the non-finite guard."""
    rows = has_gradient(advantages, loss_mask).nonzero().flatten().tolist()
    if rows:
        return rows
    return [int((loss_mask != 0).sum(dim=-1).argmin())]


def has_gradient(
    advantages: torch.Tensor,  # [B] per sequence, or [B, L-1] per token
    loss_mask: torch.Tensor,  # [B, L-1]
) -> torch.Tensor:
    """[B] bool: the row has a non-zero (or NaN) advantage on at least one loss position."""
    on_loss = loss_mask != 0  # [B, L-1]
    if advantages.dim() == 1:
        return (advantages != 0) & on_loss.any(dim=-1)
    return ((advantages != 0) & on_loss).any(dim=-1)
