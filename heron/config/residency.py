"""Colocation and offload: which components release their device memory when idle.

``colocate: true`` means trainer and rollout engine share one device and take turns: both
must be able to sleep, so offload defaults to on for both (and cannot be turned off).
Without colocation offload defaults to off; turning it on for a component makes it rest
asleep between its operations (device memory only while it works).
"""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class OffloadConfig:
    """Whether each component releases its device memory (to host) when idle."""

    train: bool | None = doc("Offload the trainer (params, grads, optimizer) when idle; null = same as colocate.", None)
    rollout: bool | None = doc("Offload the rollout engine (weights, KV cache) when idle; null = same as colocate.", None)
    wait_timeout_s: float = doc("Longest a sleep waits for in-flight work (e.g. async checkpoint staging), in seconds.", 600.0)

    def __post_init__(self):
        check(self.wait_timeout_s > 0, f"offload.wait_timeout_s must be > 0, got {self.wait_timeout_s}")


def resolve_offload(colocate: bool, offload: OffloadConfig) -> tuple[bool, bool]:
    """(offload trainer, offload engine) after defaults; raises ConfigError on a conflict."""
    train = colocate if offload.train is None else offload.train
    rollout = colocate if offload.rollout is None else offload.rollout
    check(
        not colocate or (train and rollout),
        f"colocate=true needs both components able to sleep, got offload.train={train} "
        f"offload.rollout={rollout}; remove those overrides or set colocate=false",
    )
    return train, rollout
