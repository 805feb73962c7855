"""``train.compile`` checked before any weight loads: the model (and the critic's backbone, when
``critic.path`` names another folder) must have a decoder-layer list to compile, and (local
backend, whose device is known here) the machine must have inductor's toolchain. Otherwise the
first train step would fail after the model loaded and a rollout ran. On Ray each trainer rank
and the critic's actor check their own device as they build (heron.trainer.compile)."""

from __future__ import annotations

from heron.config.base import ConfigError
from heron.config.root import HeronConfig


def check_compile(cfg: HeronConfig) -> str | None:
    """Raises ``ConfigError`` (module docstring); returns the report line, None with compile off."""
    if not cfg.train.compile:
        return None
    from heron.algo.catalog import ADVANTAGES
    from heron.device import compile_toolchain_missing, resolve
    from heron.trainer.compile import CHECKPOINTING_CONFLICT

    if cfg.train.gradient_checkpointing:
        raise ConfigError(f"train.compile=true with train.gradient_checkpointing=true: {CHECKPOINTING_CONFLICT}")
    layers = _layers(cfg.model.path, "model.path")
    line = f"compile: {len(layers)} x {type(layers[0]).__name__}, one graph"
    builders = "each trainer rank checks inductor's toolchain as it builds"
    if ADVANTAGES[cfg.algo.advantage].needs_critic:
        critic = _layers(cfg.critic.path, "critic.path") if cfg.critic.path else layers
        line += f"; the critic's {len(critic)} x {type(critic[0]).__name__} too"
        builders = "each trainer rank and the critic's actor check inductor's toolchain as they build"
    if cfg.cluster.backend == "ray":
        return f"{line} ({builders})"
    missing = compile_toolchain_missing(resolve(cfg.run.device))
    if missing is not None:
        raise ConfigError(f"train.compile=true: {missing}; or set train.compile=false")
    return f"{line}; inductor's toolchain found"


def _layers(path: str, key: str) -> list:
    """The decoder layers of the folder ``path`` (the meta model), or a ConfigError naming ``key``."""
    from heron.preflight.meta_model import meta_model
    from heron.trainer.compile import decoder_layers

    built = meta_model(path)
    layers = decoder_layers(built)
    if not layers:
        raise ConfigError(f"train.compile=true: found no decoder-layer list in {type(built).__name__} "
                          f"({key} {path}); set train.compile=false")
    return layers
