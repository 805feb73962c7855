"""What each built-in estimator and loss is, without importing torch: the config layer
validates combinations from here (``heron.config.algo_checks``) and the math lives in
``heron.algo.advantages`` / ``heron.algo.losses`` (a unit test keeps the names in step)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EstimatorInfo:
    needs_group: bool
    """True when the baseline comes from the other samples of the same prompt, so a group of
    one sample carries no signal (rollout.samples_per_prompt must be >= 2)."""
    summary: str
    needs_critic: bool = False
    """True when the advantages come from a learned value model (the ``critic`` section): token
    level, computed by the advantage stage from the critic's values (``heron.critic``)."""


@dataclass(frozen=True)
class LossInfo:
    sequence_level: bool
    """True when the importance ratio and the clipping are per sequence: needs one advantage
    per sequence and the sequence-mean aggregation (algo.loss_agg=seq-mean-token-mean)."""
    summary: str


ADVANTAGES: dict[str, EstimatorInfo] = {
    "grpo": EstimatorInfo(True, "(r - mean_group) / (std_group + eps)"),
    "dr_grpo": EstimatorInfo(True, "r - mean_group (no std division)"),
    "rloo": EstimatorInfo(True, "r_i - mean of the other samples of the group (leave-one-out)"),
    "reinforce_plus_plus": EstimatorInfo(False, "(r - mean_batch) / (std_batch + eps): global batch normalisation"),
    "reinforce_plus_plus_baseline": EstimatorInfo(True, "r - mean_group, then divided by the batch std"),
    "gae": EstimatorInfo(False, "PPO with a learned critic: GAE(gamma, lambda) per token, whitened", needs_critic=True),
}

LOSSES: dict[str, LossInfo] = {
    "ppo_clip": LossInfo(False, "PPO clipped surrogate per token (clip-higher, dual-clip)"),
    "gspo": LossInfo(True, "GSPO: length-normalised sequence ratio, sequence-level clipping"),
    "cispo": LossInfo(False, "CISPO: clipped, stop-gradient IS weight on every token's policy gradient"),
}

LOSS_AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
OFF_POLICY_MODES: tuple[str, ...] = ("none", "tis", "mis")
