"""LR multiplier per optimizer step: linear warm-up, then constant or cosine decay.

    warm-up  (s < W):  m(s) = (s + 1) / W
    constant:          m(s) = 1
    cosine:            m(s) = r + (1 - r) * 0.5 * (1 + cos(pi * (s - W) / max(1, S - W)))
with W = warm-up steps, S = total steps, r = min_lr_ratio.
"""

from __future__ import annotations

import math

import torch


def lr_multiplier(step: int, *, warmup_steps: int, total_steps: int, schedule: str, min_lr_ratio: float) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, **kw) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, **kw))
