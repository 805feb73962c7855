"""Applies the rollout-data post-process hook, and checks what hooks hand back to the loop."""

from __future__ import annotations

from typing import Any, Callable

from heron.config.hooks import HooksConfig
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


def checked_prompts(prompts: Any, n: int, source: str) -> list[Prompt]:
    """The data source's answer to get_samples(rollout.batch_size = n): exactly n Prompts,
    none of them empty (a user data source's prompts are not seen by the pre-flight)."""
    source = source or "PromptDataSource"
    if not isinstance(prompts, list) or len(prompts) != n or not all(isinstance(p, Prompt) for p in prompts):
        found = f"{len(prompts)} items" if isinstance(prompts, list) else type(prompts).__name__
        raise HookOutputError(f"data source {source!r}: get_samples({n}) returned {found}, expected a list of {n} Prompt records")
    empty = [p.prompt_id for p in prompts if not p.text.strip() and not p.messages]
    if empty:
        raise HookOutputError(f"data source {source!r}: get_samples({n}) returned empty prompts (prompt_id {empty[:4]})")
    return prompts
