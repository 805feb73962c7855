from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class OffPolicyConfig:
    """Correction for the engine/trainer mismatch, w_t = pi_old(y_t) / pi_engine(y_t), from the
    trainer's recomputed and the engine's logprobs (see heron.algo.off_policy, docs/algorithms.md)."""

    mode: Literal["none", "tis", "mis"] = doc(
        "none; tis: multiply each token's policy loss by min(w_t, tis_cap); mis: drop tokens with w_t "
        "outside [mask_low, mask_high] from the policy loss.",
        "none",
    )
    tis_cap: float = doc("tis: the truncation C of the importance weight (> 1).", 2.0)
    mask_low: float = doc("mis: smallest weight w_t a token may have and stay in the loss.", 0.5)
    mask_high: float = doc("mis: largest weight w_t a token may have and stay in the loss.", 2.0)

    def __post_init__(self):
        check(self.tis_cap > 1, f"algo.off_policy.tis_cap must be > 1, got {self.tis_cap}")
        check(
            0 <= self.mask_low < 1 < self.mask_high,
            f"algo.off_policy needs 0 <= mask_low < 1 < mask_high, got [{self.mask_low}, {self.mask_high}]",
        )
