from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class LoopConfig:
    """How rollout steps follow each other."""

    mode: Literal["sync", "async"] = doc(
        "sync: generate, then train, then push. async: rollout k+1 is generated while the trainer "
        "trains on rollout k (one-step off-policy; needs cluster.backend=ray and colocate=false).",
        "sync",
    )
    max_staleness: int = doc("async: most policy versions a trained sample may lag the trainer (checked per sample).", 1)

    def __post_init__(self):
        check(self.max_staleness >= 1, f"loop.max_staleness must be >= 1, got {self.max_staleness}")
