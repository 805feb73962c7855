from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (Yu et al. 2025): groups whose rewards are all equal (zero
    advantage, no gradient) are dropped, and more prompts are drawn and generated until the
    batch holds rollout.batch_size informative groups (see heron.rollout.batch_filler)."""

    enabled: bool = doc("Drop groups whose rewards are all equal and generate more until the batch is full.", False)
    max_rounds: int = doc(
        "Most extra generation rounds per rollout (each draws as many prompts as groups are missing); if the "
        "batch is still short, it is topped up with dropped groups (zero advantage). Must be >= 1.",
        4,
    )

    def __post_init__(self):
        check(
            not self.enabled or self.max_rounds >= 1,
            f"rollout.dynamic_sampling.max_rounds must be >= 1 when dynamic sampling is enabled, got {self.max_rounds}",
        )
