"""The critic's config section: the value model of PPO with a learned critic (``algo.advantage=gae``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class CriticConfig:
    """The value model (a scalar head on the policy's architecture) and its own AdamW; used only
    with ``algo.advantage=gae`` (formulas: docs/algorithms.md, "PPO with a learned critic")."""

    path: str = doc("Local HF folder of the value model's backbone; '' = model.path (the policy's weights).", "")
    lr: float = doc("Peak learning rate of the critic's AdamW (critics usually learn faster than the policy).", 1e-4)
    warmup_steps: int = doc("Linear warm-up of the critic's LR, in optimizer steps.", 0)
    lr_schedule: Literal["constant", "cosine"] = doc(
        "The critic's LR after warm-up: constant, or cosine decay to min_lr_ratio over the run's steps.", "constant"
    )
    min_lr_ratio: float = doc("Final LR of the critic's cosine schedule as a fraction of critic.lr.", 0.1)
    weight_decay: float = doc("AdamW decoupled weight decay of the critic.", 0.0)
    betas: list[float] = doc("AdamW betas of the critic.", factory=lambda: [0.9, 0.999])
    eps: float = doc("AdamW epsilon of the critic.", 1e-8)
    grad_clip: float = doc("Clip the critic's global grad norm to this value; 0 disables clipping.", 1.0)
    value_clip: float = doc(
        "Clipped value loss: V is kept within +-value_clip of the values the advantages were computed with "
        "(0.5 max((V - R)^2, (V_clip - R)^2)).",
        0.2,
    )

    def __post_init__(self):
        check(self.lr > 0, f"critic.lr must be > 0, got {self.lr}")
        check(self.warmup_steps >= 0, f"critic.warmup_steps must be >= 0, got {self.warmup_steps}")
        check(0 <= self.min_lr_ratio <= 1, f"critic.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), f"critic.betas must be two numbers in [0, 1), got {self.betas}")
        check(self.eps > 0, f"critic.eps must be > 0, got {self.eps}")
        check(self.weight_decay >= 0, f"critic.weight_decay must be >= 0, got {self.weight_decay}")
        check(self.grad_clip >= 0, f"critic.grad_clip must be >= 0, got {self.grad_clip}")
        check(self.value_clip > 0, f"critic.value_clip must be > 0 (the clip range of the value loss), got {self.value_clip}")
