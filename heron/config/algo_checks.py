"""Checks of the algorithm settings against other sections of the run's config (the ones
within ``algo`` live in ``AlgoConfig``). Called from ``HeronConfig.__post_init__``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron.algo.catalog import ADVANTAGES
from heron.config.base import check

if TYPE_CHECKING:
    from heron.config.root import HeronConfig


def check_algo_combinations(cfg: HeronConfig) -> None:
    algo, rollout = cfg.algo, cfg.rollout
    check(
        rollout.samples_per_prompt >= 2 or cfg.hooks.advantage != "" or not ADVANTAGES[algo.advantage].needs_group,
        f"algo.advantage={algo.advantage} compares each answer with the others of its prompt, so "
        f"rollout.samples_per_prompt={rollout.samples_per_prompt} gives every advantage 0 and trains nothing; "
        f"set rollout.samples_per_prompt>=2, or use algo.advantage=reinforce_plus_plus",
    )
    check(
        cfg.hooks.policy_loss == "" or algo.loss == "ppo_clip",
        f"hooks.policy_loss replaces algo.loss, so algo.loss={algo.loss} would be ignored; unset one of them",
    )
    check(
        algo.off_policy.mode == "none" or cfg.train.recompute_old_logprobs,
        f"algo.off_policy.mode={algo.off_policy.mode} compares the trainer's old logprobs with the engine's: "
        f"it needs train.recompute_old_logprobs=true",
    )
    check_critic_combinations(cfg)
    check(
        cfg.reward.overlong_buffer < rollout.max_new_tokens,
        f"reward.overlong_buffer={cfg.reward.overlong_buffer} must be < rollout.max_new_tokens={rollout.max_new_tokens}",
    )
    check(
        not rollout.dynamic_sampling.enabled or cfg.loop.mode == "sync",
        "rollout.dynamic_sampling needs loop.mode=sync (extra rounds are generated with the current weights)",
    )


def check_critic_combinations(cfg: HeronConfig) -> None:
    """PPO with a learned critic (``algo.advantage=gae``) against the rest of the run."""
    from heron.config.critic import CriticConfig

    algo, uses_critic = cfg.algo, ADVANTAGES[cfg.algo.advantage].needs_critic
    check(
        uses_critic or cfg.critic == CriticConfig(),
        f"the critic section trains a value model, but algo.advantage={algo.advantage} does not use one; "
        f"set algo.advantage=gae (PPO with a learned critic) or remove the critic settings",
    )
    if not uses_critic:
        return
    check(
        cfg.hooks.advantage == "",
        "hooks.advantage replaces the advantage estimator, but algo.advantage=gae computes advantages from the "
        "critic's values; unset one of them",
    )
    check(
        cfg.hooks.policy_loss == "",
        "hooks.policy_loss gets one advantage per sequence, but algo.advantage=gae gives one per token; "
        "unset hooks.policy_loss or use another algo.advantage",
    )
