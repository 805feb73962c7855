"""Rollout engine backends by name (``engine.kind``): adding one is one file plus one line here.

A builder takes an ``EngineSpec`` (only the config sections an engine needs, small enough to
ship to an engine actor) and returns an object implementing ``heron.rollout.engine.RolloutEngine``.
Builders are named by import path, so this module imports no backend (and no torch) itself.

A backend whose inputs lie outside the config (a server's own venv) may also name a check in
``ENGINE_CHECKS``: ``check(engine, model)`` raises ``ConfigError`` and runs in ``heron check``
and before a run builds anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

from heron.config.engine import EngineConfig
from heron.config.model import ModelConfig
from heron.config.rollout import RolloutConfig

ENGINE_BUILDERS: dict[str, str] = {
    "embedded": "heron.rollout.embedded:build_embedded_engine",
    "vllm": "heron.rollout.vllm.build:build_vllm_engine",
}
ENGINE_CHECKS: dict[str, str] = {
    "vllm": "heron.rollout.vllm.build:check_vllm_inputs",  # the vLLM venv exists, max_model_len fits
}


@dataclass(frozen=True)
class EngineSpec:
    """What building one rollout engine needs, and nothing more. ``engine`` carries the kind
    and the backends' own sections (``engine.vllm``); a server engine also uses the run's seed,
    its folder (server log, pushed weights) and whether the engine rests offloaded."""

    engine: EngineConfig
    model: ModelConfig
    rollout: RolloutConfig
    pad_token_id: int
    seed: int = 0
    run_dir: str = "."
    offload: bool = False  # offload.rollout, resolved: a server that can sleep starts in sleep mode
    name: str = "engine"  # the engine actor's name on Ray (a server's log: <run_dir>/<name>.log)
    device: str = "auto"  # run.device (local) or cluster.device (Ray): resolved by heron.device where it is built
    allow_emulated_bf16: bool = False  # run.allow_emulated_bf16 (heron.device.check_bf16)

    @property
    def kind(self) -> str:
        return self.engine.kind


def register_engine(kind: str, builder: str | Callable) -> None:
    """Adds a backend at run time (tests, plugins): ``builder(spec) -> RolloutEngine`` or its
    ``module:function`` path. A backend that ships with heron is a line in ``ENGINE_BUILDERS``."""
    ENGINE_BUILDERS[kind] = builder  # type: ignore[assignment]


def build_engine(spec: EngineSpec):
    """The engine of ``spec.kind`` (in this process, or inside an engine actor)."""
    if spec.kind not in ENGINE_BUILDERS:
        raise ValueError(f"unknown engine kind {spec.kind!r}; registered: {', '.join(sorted(ENGINE_BUILDERS))}")
    return _resolve(ENGINE_BUILDERS[spec.kind])(spec)


def check_engine_inputs(engine: EngineConfig, model: ModelConfig) -> None:
    """Runs the backend's ``ENGINE_CHECKS`` entry, if it has one (before anything is built)."""
    if engine.kind in ENGINE_CHECKS:
        _resolve(ENGINE_CHECKS[engine.kind])(engine, model)


def _resolve(target: str | Callable) -> Callable:
    if isinstance(target, str):
        module, name = target.split(":")
        return getattr(import_module(module), name)
    return target
