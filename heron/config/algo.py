from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


# Whether each advantage estimator's baseline is the prompt's group: with one sample per
# prompt such an estimator gives every advantage 0 and trains nothing. A new estimator in
# ``AlgoConfig.advantage`` declares itself here (a unit test checks that every one does).
ADVANTAGE_NEEDS_GROUP: dict[str, bool] = {"grpo": True, "dr_grpo": True}


@dataclass(frozen=True)
class AlgoConfig:
    """The RL objective: advantage estimator, policy loss and KL regularisation."""

    advantage: Literal["grpo", "dr_grpo"] = doc(
        "grpo: (r - mean) / (std + eps) per group; dr_grpo: r - mean (no std division).", "grpo"
    )
    loss: Literal["ppo_clip"] = doc("Policy loss: PPO clipped surrogate, token-level aggregation.", "ppo_clip")
    clip_low: float = doc("Lower clip range: ratio >= 1 - clip_low.", 0.2)
    clip_high: float = doc("Upper clip range: ratio <= 1 + clip_high (DAPO's clip-higher when > clip_low).", 0.2)
    kl_coef: float = doc("Weight of the KL penalty to the frozen reference model; 0 disables it.", 0.0)
    kl_estimator: Literal["k1", "k3"] = doc("KL estimator: k1 = log(p/p_ref), k3 = Schulman's low-variance one.", "k3")

    def __post_init__(self):
        check(0 <= self.clip_low < 1, f"algo.clip_low must be in [0, 1), got {self.clip_low}")
        check(self.clip_high >= 0, f"algo.clip_high must be >= 0, got {self.clip_high}")
        check(self.kl_coef >= 0, f"algo.kl_coef must be >= 0, got {self.kl_coef}")

    @property
    def needs_group(self) -> bool:
        """The estimator compares each answer with the other answers to its prompt."""
        return ADVANTAGE_NEEDS_GROUP[self.advantage]

    def check_group_size(self, samples_per_prompt: int) -> None:
        """One-line ``ConfigError`` when a group baseline meets groups of one sample."""
        check(
            samples_per_prompt >= 2 or not self.needs_group,
            f"algo.advantage={self.advantage} compares each answer with the others of its prompt, so "
            f"rollout.samples_per_prompt={samples_per_prompt} gives every advantage 0 and trains nothing; "
            f"set rollout.samples_per_prompt>=2",
        )
