"""Loads every hook a run's config names, all at once and before anything heavy (no torch
model, no dataset), so a wrong hook stops the run within seconds with the loader's one-line
error. The components are then built from the loaded, checked callables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from heron.config.hooks import HooksConfig
from heron.config.reward import RewardConfig
from heron.plugins.loader import is_async_callable, load_hook


@dataclass(frozen=True)
class RunHooks:
    """The run's hooks; None where the config keeps the built-in behaviour."""

    reward_fn: Callable[..., Any]
    reward_scope: str
    generate: Callable[..., Any] | None = None
    rollout_data_postprocess: Callable[..., Any] | None = None
    advantage: Callable[..., Any] | None = None
    policy_loss: Callable[..., Any] | None = None
    data_source: type | None = None

    def custom_generate(self, hooks: HooksConfig):
        if self.generate is None:
            return None
        from heron.rollout.custom_generate import CustomGenerate

        return CustomGenerate(self.generate, hooks.generate_scope, is_async_callable(self.generate), hooks.generate)


def load_run_hooks(hooks: HooksConfig, reward: RewardConfig) -> RunHooks:
    from heron.reward.reward_fn import build_reward_fn

    h = hooks
    reward_fn, scope = build_reward_fn(reward)

    def optional(point: str, spec: str):
        return load_hook(point, spec) if spec else None

    return RunHooks(
        reward_fn=reward_fn,
        reward_scope=scope,
        generate=optional(f"generate_{h.generate_scope}", h.generate),
        rollout_data_postprocess=optional("rollout_data_postprocess", h.rollout_data_postprocess),
        advantage=optional("advantage", h.advantage),
        policy_loss=optional("policy_loss", h.policy_loss),
        data_source=optional("data_source", h.data_source),
    )
