"""The reward stage: fills ``Sample.reward`` for every sample of a rollout batch."""

from __future__ import annotations

from typing import Callable

from heron.config.base import ConfigError
from heron.records import Prompt, RolloutBatch
from heron.reward.builtin import BUILTIN_REWARDS

RewardFn = Callable[[Prompt, str], float]


class RewardScorer:
    def __init__(self, fn: RewardFn):
        self.fn = fn

    @classmethod
    def from_name(cls, name: str) -> "RewardScorer":
        if name not in BUILTIN_REWARDS:
            raise ConfigError(f"unknown reward.fn '{name}'; built-ins: {sorted(BUILTIN_REWARDS)}")
        return cls(BUILTIN_REWARDS[name])

    def score(self, batch: RolloutBatch) -> RolloutBatch:
        for group in batch.groups:
            for sample in group.samples:
                sample.reward = float(self.fn(group.prompt, sample.response_text))
        return batch
