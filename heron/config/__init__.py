"""Typed, documented, validated configuration (importable without torch)."""

from heron.config.base import ConfigError, to_dict
from heron.config.root import HeronConfig, load_config

__all__ = ["ConfigError", "HeronConfig", "load_config", "to_dict"]
