"""Advantage estimators without a value network: each maps the batch's rewards to one
advantage per sample.

Shapes: G = num_groups (prompts), N = group_size (completions per prompt). Every estimator
sees the whole rollout batch at once, rewards [G, N] (all groups of a batch have the same
size, see ``heron.algo.assign``), so batch-level statistics are possible.

Group baselines (need N >= 2; see ``heron.algo.catalog``):

- "grpo" (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean(r)) / (std(r) + eps).
  std is the unbiased sample std (divide by N - 1), as in TRL and verl.
- "dr_grpo" (Liu et al. 2025, "Understanding R1-Zero-like Training"): A_i = r_i - mean(r).
  Dividing by std up-weights groups whose rewards barely differ (nearly all right or
  all wrong), a difficulty bias; Dr.GRPO drops it. (Its second fix, a constant loss
  normaliser, is ``algo.loss_agg=seq-mean-token-sum-norm``.)
- "rloo" (Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free!";
  Ahmadian et al. 2024, "Back to Basics"): A_i = r_i - 1/(N-1) sum_{j != i} r_j
  = N/(N-1) * (r_i - mean(r)). The baseline excludes the sample itself, so it is
  independent of r_i and the estimator is unbiased.
- "reinforce_plus_plus_baseline" (Hu 2025, arXiv 2501.03262): A_i = r_i - mean_group(r),
  then divided by the std of those centred values over the whole batch (the batch mean
  of group-centred values is exactly 0 for equal group sizes, so it is not subtracted).

Global baseline (any N, including 1):

- "reinforce_plus_plus" (Hu 2025): A_i = (r_i - mean_batch(r)) / (std_batch(r) + eps),
  mean and unbiased std over all G * N samples of the batch ("global batch
  normalisation"). heron normalises over sequences (each response counts once); verl and
  OpenRLHF whiten token-level returns over tokens, which weights long responses more --
  the same thing when all responses have one length.

Groups whose rewards are all equal carry no learning signal under a group baseline and get
advantage exactly 0 (not nan, and not float round-off); so does a whole batch of equal
rewards under the global baseline.
"""

import functools
from collections.abc import Callable

import torch

AdvantageEstimator = Callable[[torch.Tensor], torch.Tensor]
"""Maps rewards [G, N] to advantages [G, N]."""


def _check_shape(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {tuple(rewards.shape)}")


def _constant_rows(rewards: torch.Tensor) -> torch.Tensor:
    return (rewards == rewards[:, :1]).all(dim=-1, keepdim=True)  # [G, 1]


def grpo_advantages(
    rewards: torch.Tensor, *, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) per group, or r_i - mean(r) without std.

    rewards: [G, N] float. Returns [G, N]. std is unbiased (N - 1 denominator).
    """
    _check_shape(rewards)
    is_constant = _constant_rows(rewards)  # [G, 1]
    centered = rewards - rewards.mean(dim=-1, keepdim=True)  # [G, N]
    if std_normalize and rewards.shape[-1] > 1:
        centered = centered / (rewards.std(dim=-1, keepdim=True) + eps)  # [G, N]
    return torch.where(is_constant, torch.zeros_like(centered), centered)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = r_i - (sum_j r_j - r_i) / (N - 1) per group. rewards: [G, N] with N >= 2."""
    _check_shape(rewards)
    n = rewards.shape[-1]
    if n < 2:
        raise ValueError(f"rloo needs at least 2 samples per group (a leave-one-out baseline), got {n}")
    baseline = (rewards.sum(dim=-1, keepdim=True) - rewards) / (n - 1)  # [G, N]
    return torch.where(_constant_rows(rewards), torch.zeros_like(rewards), rewards - baseline)


def _batch_normalize(values: torch.Tensor, *, subtract_mean: bool, eps: float) -> torch.Tensor:
    """(values - mean) / (std + eps) over every element of [G, N]; 0 where all are equal."""
    flat = values.flatten()  # [G * N]
    if flat.numel() < 2 or bool((flat == flat[0]).all()):
        return torch.zeros_like(values)
    centered = values - flat.mean() if subtract_mean else values  # [G, N]
    return centered / (flat.std() + eps)


def reinforce_plus_plus_advantages(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """A = (r - mean_batch(r)) / (std_batch(r) + eps). rewards: [G, N], any N."""
    _check_shape(rewards)
    return _batch_normalize(rewards, subtract_mean=True, eps=eps)


def reinforce_plus_plus_baseline_advantages(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """A = c / (std_batch(c) + eps) with c = r - mean_group(r). rewards: [G, N], N >= 2."""
    _check_shape(rewards)
    centered = grpo_advantages(rewards, std_normalize=False)  # [G, N]; exactly 0 for constant groups
    return _batch_normalize(centered, subtract_mean=False, eps=eps)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": functools.partial(grpo_advantages, std_normalize=True),
    "dr_grpo": functools.partial(grpo_advantages, std_normalize=False),
    "rloo": rloo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline_advantages,
}
