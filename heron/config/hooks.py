from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from heron.config.base import doc


@dataclass(frozen=True)
class HooksConfig:
    """User code plugged into the run (see docs/hooks.md). Each value is a hook path:
    ``package.module:function``, ``package.module.function`` or ``path/to/file.py:function``;
    empty keeps the built-in behaviour. Hooks are loaded and checked before any model loads."""

    generate: str = doc("Custom generate function (multi-turn, tools); replaces single-turn sampling.", "")
    generate_scope: Literal["sample", "group"] = doc(
        "What one call of hooks.generate makes: one sample (ctx, prompt, sample_index) or a whole group (ctx, prompt).",
        "sample",
    )
    rollout_data_postprocess: str = doc(
        "Called as fn(config, rollout_id, rollout_data) after advantages, before training.", ""
    )
    advantage: str = doc("Advantage estimator rewards [G, N] -> advantages [G, N]; replaces algo.advantage.", "")
    policy_loss: str = doc("Policy loss with the signature of heron.algo.policy_loss.ppo_clip_loss; replaces algo.loss.", "")
    data_source: str = doc("Data source class cls(config: DataConfig, seed) with get/add_samples and state_dict.", "")
    args: dict[str, Any] = doc("Free-form parameters for your hooks (hooks.args.<name>=value); they read config.args.", factory=dict)
