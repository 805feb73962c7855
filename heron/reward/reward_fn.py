"""``reward.fn`` resolved to a callable: a built-in name, ``remote``, or a checked hook path. Its
own module because the reward's worker processes (heron.reward.process_pool) build it too."""

from __future__ import annotations

from typing import Any, Callable

from heron.config.reward import RewardConfig
from heron.reward.builtin import BUILTIN_REWARDS


def build_reward_fn(cfg: RewardConfig) -> tuple[Callable[..., Any], str]:
    """(function, scope) for ``reward.fn``: a built-in name or a checked hook path."""
    if cfg.fn == "remote":
        from heron.reward.remote import RemoteReward

        return RemoteReward(cfg.remote), "sample"
    if cfg.fn in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[cfg.fn], "sample"
    from heron.plugins.loader import HookError, load_hook

    if ":" not in cfg.fn and "." not in cfg.fn:
        raise HookError(f"unknown reward.fn '{cfg.fn}'; built-ins: {sorted([*BUILTIN_REWARDS, 'remote'])}, or a hook path module:function")
    point = {"sample": "reward", "group": "group_reward", "batch": "batch_reward"}[cfg.scope]
    return load_hook(point, cfg.fn), cfg.scope
