from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import doc


@dataclass(frozen=True)
class RewardConfig:
    """How samples are scored."""

    fn: str = doc("Reward function: a built-in name (exact_match) or a hook path module:function.", "exact_match")
