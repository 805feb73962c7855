"""Checks of ``train.*`` against other sections (kept here so root.py only calls them)."""

from __future__ import annotations

from heron.config.base import check
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig


def check_precision(train: TrainConfig, model: ModelConfig) -> None:
    """Mixed precision keeps float32 master weights: bf16 autocast over bfloat16 parameters
    would be pure bf16 training under another name."""
    check(
        train.precision == "fp32" or model.dtype == "float32",
        f"train.precision={train.precision} keeps float32 master weights, but model.dtype={model.dtype}: set "
        f"model.dtype=float32 (or train.precision=fp32 for pure {model.dtype} training)",
    )
