from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import doc


@dataclass(frozen=True)
class TrackingConfig:
    """What the user sees: progress bar, per-rollout summary, metrics file, plots."""

    progress: bool = doc("Show a progress bar over rollouts.", True)
    summary: bool = doc("Print a one-line summary per rollout.", True)
    plot: bool = doc("Write reward_curve.png into run.dir at the end.", True)
    tensorboard: bool = doc("Also write TensorBoard event files into run.dir/tb.", False)
