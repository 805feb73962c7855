from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc
from heron.config.off_policy import OffPolicyConfig


@dataclass(frozen=True)
class AlgoConfig:
    """The RL objective: advantage estimator, policy loss, its aggregation, KL and entropy
    regularisation, and the engine-mismatch correction (formulas: docs/algorithms.md)."""

    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"] = doc(
        "grpo: (r - mean) / (std + eps) per group; dr_grpo: r - mean; rloo: r - mean of the other samples; "
        "reinforce_plus_plus: (r - batch mean) / batch std; reinforce_plus_plus_baseline: (r - group mean) / batch std; "
        "gae: PPO with a learned critic (the critic section), GAE per token, whitened over the batch.",
        "grpo",
    )
    gamma: float = doc("Discount gamma of GAE over response tokens (algo.advantage=gae), in [0, 1].", 1.0)
    lam: float = doc("GAE's lambda (algo.advantage=gae), in [0, 1]: 1 = Monte-Carlo return minus V, 0 = one-step TD.", 1.0)
    loss: Literal["ppo_clip", "gspo", "cispo"] = doc(
        "Policy loss: ppo_clip (token ratio, clipped surrogate); gspo (sequence ratio, sequence clipping; needs "
        "loss_agg=seq-mean-token-mean); cispo (clipped stop-gradient IS weight, every token keeps a gradient).",
        "ppo_clip",
    )
    loss_agg: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = doc(
        "How token terms become the loss: token-mean (all tokens of the mini-batch weigh the same); "
        "seq-mean-token-mean (mean per sequence, then over sequences); seq-mean-token-sum (sum per sequence, mean "
        "over sequences); seq-mean-token-sum-norm (Dr.GRPO: sum / (sequences x rollout.max_new_tokens)).",
        "token-mean",
    )
    clip_low: float = doc("Lower clip range: ratio >= 1 - clip_low (cispo: 1 = no lower bound).", 0.2)
    clip_high: float = doc("Upper clip range: ratio <= 1 + clip_high (DAPO's clip-higher when > clip_low).", 0.2)
    clip_ratio_c: float = doc(
        "Dual-clip PPO (ppo_clip): for A < 0 the token loss is capped at clip_ratio_c * |A| (> 1, e.g. 3); 0 disables it.",
        0.0,
    )
    max_log_ratio: float = doc(
        "Clamp of log(pi / pi_old) before exp, so stale old logprobs cannot give inf/nan losses; 0 disables it.", 20.0
    )
    kl_coef: float = doc("Weight beta of the KL penalty to the frozen reference model; 0 disables it.", 0.0)
    kl_estimator: Literal["k1", "k2", "k3"] = doc(
        "KL estimator: k1 = log(p/p_ref) (for the reward: zero expected gradient as a loss), k2 = 0.5 log(p/p_ref)^2 "
        "(its loss gradient is the reverse KL's), k3 = Schulman's low-variance one (GRPO's loss term).",
        "k3",
    )
    kl_in_reward: bool = doc(
        "Fold the KL into the reward (r - kl_coef * sum_t KL_t per sequence, before the advantage estimator) "
        "instead of adding kl_coef * KL to the loss. Use with kl_estimator=k1.",
        False,
    )
    entropy_coef: float = doc("Entropy bonus: the loss minus entropy_coef * entropy (aggregated like the loss); 0 disables it.", 0.0)
    off_policy: OffPolicyConfig = doc("Engine/trainer mismatch correction (TIS or MIS).", factory=OffPolicyConfig)

    def __post_init__(self):
        check(
            0 <= self.clip_low < 1 or (self.loss == "cispo" and self.clip_low == 1),
            f"algo.clip_low must be in [0, 1) (cispo: [0, 1]), got {self.clip_low}",
        )
        check(self.clip_high >= 0, f"algo.clip_high must be >= 0, got {self.clip_high}")
        check(self.clip_ratio_c == 0 or self.clip_ratio_c > 1, f"algo.clip_ratio_c must be 0 (off) or > 1, got {self.clip_ratio_c}")
        check(self.max_log_ratio >= 0, f"algo.max_log_ratio must be >= 0, got {self.max_log_ratio}")
        check(0 <= self.gamma <= 1, f"algo.gamma must be in [0, 1], got {self.gamma}")
        check(0 <= self.lam <= 1, f"algo.lam must be in [0, 1], got {self.lam}")
        check(
            self.advantage != "gae" or self.loss != "gspo",
            "algo.advantage=gae gives one advantage per token, but algo.loss=gspo clips per sequence; use ppo_clip or cispo",
        )
        check(self.kl_coef >= 0, f"algo.kl_coef must be >= 0, got {self.kl_coef}")
        check(self.entropy_coef >= 0, f"algo.entropy_coef must be >= 0, got {self.entropy_coef}")
        check(not self.kl_in_reward or self.kl_coef > 0, "algo.kl_in_reward needs algo.kl_coef > 0 (the weight of the KL penalty)")
        check(
            self.loss != "gspo" or self.loss_agg == "seq-mean-token-mean",
            f"algo.loss=gspo is a sequence-level objective (1/G sum_i l_i): set algo.loss_agg=seq-mean-token-mean, not {self.loss_agg}",
        )
        check(
            self.clip_ratio_c == 0 or self.loss == "ppo_clip",
            f"algo.clip_ratio_c (dual-clip) applies to algo.loss=ppo_clip only, not {self.loss}; set it to 0",
        )
