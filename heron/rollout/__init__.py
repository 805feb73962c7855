"""Rollout engines: the ``RolloutEngine`` protocol and its embedded (in-process HF) backend."""

from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.engine import RolloutEngine

__all__ = ["EmbeddedEngine", "RolloutEngine"]
