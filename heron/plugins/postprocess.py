"""Applies the rollout-data post-process hook, and checks what hooks hand back to the loop."""

from __future__ import annotations

from typing import Any, Callable

from heron.config.hooks import HooksConfig
from heron.config.root import HeronConfig
from heron.records import Prompt, RolloutBatch
from heron.rollout.custom_generate import HookOutputError


def apply_postprocess(fn: Callable[..., Any] | None, config: HooksConfig, batch: RolloutBatch) -> RolloutBatch:
    """``fn(config, rollout_id, rollout_data)``: None means edited in place; a RolloutBatch
    replaces the batch (same rollout_id, at least one sample)."""
    if fn is None:
        return batch
    out = fn(config, batch.rollout_id, batch)
    if out is None:
        out = batch
    name = config.rollout_data_postprocess
    if not isinstance(out, RolloutBatch):
        raise HookOutputError(f"hooks.rollout_data_postprocess {name!r} returned {type(out).__name__}, expected None or a RolloutBatch")
    if out.rollout_id != batch.rollout_id or out.num_samples == 0:
        raise HookOutputError(
            f"hooks.rollout_data_postprocess {name!r} returned a batch of rollout {out.rollout_id} with "
            f"{out.num_samples} samples; expected rollout {batch.rollout_id} with at least one sample"
        )
    missing = [s.sample_id for s in out.samples if s.reward is None or s.advantage is None]
    if missing:
        raise HookOutputError(f"hooks.rollout_data_postprocess {name!r} left samples without reward/advantage: {missing[:4]}")
    return out


def checked_prompts(prompts: Any, cfg: HeronConfig, num: int | None = None) -> list[Prompt]:
    """The data source's answer to get_samples(num) (default rollout.batch_size): exactly that many Prompts."""
    n = cfg.rollout.batch_size if num is None else num
    if not isinstance(prompts, list) or len(prompts) != n or not all(isinstance(p, Prompt) for p in prompts):
        found = f"{len(prompts)} items" if isinstance(prompts, list) else type(prompts).__name__
        raise HookOutputError(
            f"data source {cfg.hooks.data_source or 'PromptDataSource'!r}: get_samples({n}) returned {found}, "
            f"expected a list of {n} Prompt records"
        )
    return prompts
