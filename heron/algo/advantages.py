"""Group-relative advantages: each prompt's completions are scored against each other.

Shapes: G = num_groups (prompts), N = group_size (completions per prompt).

Variants (both use no value network; the group mean is the baseline):

- "grpo" (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean(r)) / (std(r) + eps).
  std is the unbiased sample std (divide by N - 1), as in TRL and verl.
- "dr_grpo" (Liu et al. 2025, "Understanding R1-Zero-like Training"): A_i = r_i - mean(r).
  Dividing by std up-weights groups whose rewards barely differ (nearly all right or
  all wrong), a difficulty bias; Dr.GRPO drops it.

Groups whose rewards are all equal, which includes groups of size 1, carry no
learning signal and get advantage exactly 0 (not nan, and not float round-off).
"""

import functools
from collections.abc import Callable

import torch

AdvantageEstimator = Callable[[torch.Tensor], torch.Tensor]
"""Maps rewards [G, N] to advantages [G, N]."""


def grpo_advantages(
    rewards: torch.Tensor, *, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) per group, or r_i - mean(r) without std.

    rewards: [G, N] float. Returns [G, N]. std is unbiased (N - 1 denominator).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {tuple(rewards.shape)}")
    is_constant = (rewards == rewards[:, :1]).all(dim=-1, keepdim=True)  # [G, 1]
    centered = rewards - rewards.mean(dim=-1, keepdim=True)  # [G, N]
    if std_normalize and rewards.shape[-1] > 1:
        centered = centered / (rewards.std(dim=-1, keepdim=True) + eps)  # [G, N]
    return torch.where(is_constant, torch.zeros_like(centered), centered)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": functools.partial(grpo_advantages, std_normalize=True),
    "dr_grpo": functools.partial(grpo_advantages, std_normalize=False),
}
