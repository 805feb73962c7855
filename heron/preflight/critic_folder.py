"""Pre-flight of the critic's own model folder (``critic.path``, with ``algo.advantage=gae``): an HF
folder whose vocabulary is the policy's, since the value model reads the policy's token ids.
Checked before any model loads; '' (the default) means ``model.path``, checked already."""

from __future__ import annotations

from pathlib import Path

from heron.algo.catalog import ADVANTAGES
from heron.config.base import ConfigError
from heron.config.root import HeronConfig


def check_critic_folder(cfg: HeronConfig) -> None:
    path = cfg.critic.path
    if not ADVANTAGES[cfg.algo.advantage].needs_critic or not path:
        return
    from transformers import AutoConfig

    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"critic.path '{path}' is not an HF model folder (no config.json); set critic.path='' to start the critic from model.path")
    critic_vocab = getattr(AutoConfig.from_pretrained(path), "vocab_size", None)
    policy_vocab = getattr(AutoConfig.from_pretrained(cfg.model.path), "vocab_size", None)
    if critic_vocab != policy_vocab:
        raise ConfigError(
            f"critic.path '{path}' has a vocabulary of {critic_vocab} tokens but model.path has {policy_vocab}: the critic "
            f"reads the policy's token ids, so it needs the policy's tokenizer (or set critic.path='')"
        )
