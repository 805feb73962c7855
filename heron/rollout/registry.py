"""Rollout engine backends by name (``engine.kind``): adding one is one file plus one line here.

A builder takes an ``EngineSpec`` (only the config sections an engine needs, small enough to
ship to an engine actor) and returns an object implementing ``heron.rollout.engine.RolloutEngine``.
Builders are named by import path, so this module imports no backend (and no torch) itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

from heron.config.model import ModelConfig
from heron.config.rollout import RolloutConfig

ENGINE_BUILDERS: dict[str, str] = {
    "embedded": "heron.rollout.embedded:build_embedded_engine",
}


@dataclass(frozen=True)
class EngineSpec:
    """What building one rollout engine needs, and nothing more."""

    kind: str
    model: ModelConfig
    rollout: RolloutConfig
    pad_token_id: int


def register_engine(kind: str, builder: str | Callable) -> None:
    """Adds a backend at run time (tests, plugins): ``builder(spec) -> RolloutEngine`` or its
    ``module:function`` path. A backend that ships with heron is a line in ``ENGINE_BUILDERS``."""
    ENGINE_BUILDERS[kind] = builder  # type: ignore[assignment]


def build_engine(spec: EngineSpec):
    """The engine of ``spec.kind`` (in this process, or inside an engine actor)."""
    if spec.kind not in ENGINE_BUILDERS:
        raise ValueError(f"unknown engine kind {spec.kind!r}; registered: {', '.join(sorted(ENGINE_BUILDERS))}")
    builder = ENGINE_BUILDERS[spec.kind]
    if isinstance(builder, str):
        module, name = builder.split(":")
        builder = getattr(import_module(module), name)
    return builder(spec)
