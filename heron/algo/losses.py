"""The built-in policy losses by name (``algo.loss``), each with the hook signature of
``hooks.policy_loss``: (logprobs, old_logprobs, advantages, loss_mask, *, clip_low,
clip_high, normalizer) -> PolicyLossOutput. Settings beyond those are bound from the config."""

from __future__ import annotations

import functools
from collections.abc import Callable

from heron.algo.cispo import cispo_loss
from heron.algo.gspo import gspo_loss
from heron.algo.policy_loss import PolicyLossOutput, ppo_clip_loss

POLICY_LOSSES: dict[str, Callable[..., PolicyLossOutput]] = {
    "ppo_clip": ppo_clip_loss,
    "gspo": gspo_loss,
    "cispo": cispo_loss,
}


def policy_loss_from_config(cfg) -> Callable[..., PolicyLossOutput]:
    """``algo.loss`` with its extra settings (``cfg``: an AlgoConfig) bound."""
    fn = POLICY_LOSSES[cfg.loss]
    if cfg.loss == "ppo_clip":
        return functools.partial(fn, clip_ratio_c=cfg.clip_ratio_c, max_log_ratio=cfg.max_log_ratio)
    return functools.partial(fn, max_log_ratio=cfg.max_log_ratio)
