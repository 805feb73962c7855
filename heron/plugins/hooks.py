"""Every hook point of heron, in one place: its signature, when it is called, and an example.

A hook is a plain function (or, for the data source, a small class) named in the config by
``package.module:function``, ``package.module.function`` or ``path/to/file.py:function``.
``heron.plugins.loader`` checks each hook against the signature written here when the run
starts, before any model is loaded, and ``docs/hooks.md`` is generated from this module (a
test regenerates it and compares), so the code, the check and the docs cannot drift apart.

Which ``config`` a hook receives: never a global args object. A hook that takes a config gets
the frozen config of the component that calls it (``HooksConfig`` for the rollout-data
post-process, ``DataConfig`` for a data source); free-form parameters for your own hooks go in
``hooks.args`` (e.g. ``hooks.args.scale=0.5``).

Legend for tensor shapes: G = groups, N = samples per group, B = sequences, T = tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from heron.algo.policy_loss import PolicyLossOutput
    from heron.config.data import DataConfig
    from heron.config.hooks import HooksConfig
    from heron.records import Prompt, RolloutBatch, Sample
    from heron.rollout.generate_context import GenerateContext


class GenerateSampleFn(Protocol):
    def __call__(self, ctx: GenerateContext, prompt: Prompt, sample_index: int) -> Sample:
        """Makes one sample of ``prompt``."""


class GenerateGroupFn(Protocol):
    def __call__(self, ctx: GenerateContext, prompt: Prompt) -> list[Sample]:
        """Makes all ``ctx.samples_per_prompt`` samples of ``prompt``."""


class RewardFn(Protocol):
    def __call__(self, prompt: Prompt, response: str) -> float:
        """Scores one response."""


class GroupRewardFn(Protocol):
    def __call__(self, prompt: Prompt, responses: list[str]) -> list[float]:
        """Scores the responses of one group, one reward each, in order."""


class BatchRewardFn(Protocol):
    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        """Scores a whole batch (``prompts[i]`` is the prompt of ``responses[i]``)."""


class RolloutDataPostprocessFn(Protocol):
    def __call__(self, config: HooksConfig, rollout_id: int, rollout_data: RolloutBatch) -> RolloutBatch | None:
        """Edits ``rollout_data`` in place (return None) or returns a replacement batch."""


class AdvantageFn(Protocol):
    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        """Maps rewards [G, N] to advantages [G, N]."""


class PolicyLossFn(Protocol):
    def __call__(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        loss_mask: torch.Tensor,
        *,
        clip_low: float,
        clip_high: float,
        normalizer: float,
    ) -> PolicyLossOutput:
        """Loss of one micro-batch: logprobs, old_logprobs, loss_mask (0/1 or token weights) [B, T]; advantages [B]."""


class DataSource(Protocol):
    """Where prompts come from. The built-in one walks a dataset in seeded epochs."""

    def __init__(self, config: DataConfig, seed: int) -> None: ...

    def get_samples(self, num: int) -> list[Prompt]:
        """The next ``num`` prompts."""

    def add_samples(self, prompts: list[Prompt]) -> None:
        """Gives prompts back; they are handed out again before new ones (e.g. filtered groups)."""

    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able) that restores the exact position: saved in checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by ``state_dict``."""


Asyncness = Literal["sync", "async", "either"]


@dataclass(frozen=True)
class HookPoint:
    """One place where user code plugs in; the loader checks hooks against ``protocol``."""

    name: str
    config_key: str
    protocol: type
    asyncness: Asyncness
    when: str
    example: str
    kind: Literal["function", "class"] = "function"


HOOK_POINTS: dict[str, HookPoint] = {
    p.name: p
    for p in [
        HookPoint(
            name="generate_sample",
            config_key="hooks.generate (hooks.generate_scope=sample)",
            protocol=GenerateSampleFn,
            asyncness="either",
            when=(
                "In the generate step, once per sample (rollout.samples_per_prompt per prompt), instead of the "
                "built-in single-turn sampling. May be multi-turn: call ctx.generate() several times and append "
                "tool/environment tokens with loss_mask 0 (only policy tokens get loss_mask 1). Async hooks of one "
                "rollout run concurrently and their ctx.agenerate() calls are decoded as one engine batch per turn."
            ),
            example="""\
def generate(ctx, prompt, sample_index):
    tokens = ctx.encode(prompt)
    gen = ctx.generate(tokens, ctx.params(prompt, sample_index))
    return ctx.make_sample(prompt, sample_index, tokens, gen.tokens, gen.logprobs,
                           [1] * len(gen.tokens), gen.finish_reason, gen.policy_version)""",
        ),
        HookPoint(
            name="generate_group",
            config_key="hooks.generate (hooks.generate_scope=group)",
            protocol=GenerateGroupFn,
            asyncness="either",
            when=(
                "In the generate step, once per prompt; returns the whole group (exactly "
                "ctx.samples_per_prompt samples, sample_index 0..n-1), e.g. to share a prefix or search. Async "
                "hooks run concurrently, as for generate_sample."
            ),
            example="""\
def generate(ctx, prompt):
    return [my_generate(ctx, prompt, i) for i in range(ctx.samples_per_prompt)]""",
        ),
        HookPoint(
            name="reward",
            config_key="reward.fn (reward.scope=sample)",
            protocol=RewardFn,
            asyncness="either",
            when=(
                "In the reward step, once per sample (and once per eval prompt). Sync hooks run on up to "
                "reward.max_concurrency threads (or in reward.processes worker processes, where arguments and result "
                "must pickle), async ones as concurrent tasks; an exception or a call over "
                "reward.timeout_s gets reward.failure_value under reward.on_error=penalize."
            ),
            example="""\
def reward(prompt, response):
    return 1.0 if response.strip() == prompt.label else 0.0""",
        ),
        HookPoint(
            name="group_reward",
            config_key="reward.fn (reward.scope=group)",
            protocol=GroupRewardFn,
            asyncness="either",
            when="In the reward step, once per group (all samples of one prompt); in eval with one response.",
            example="""\
def reward(prompt, responses):
    return [1.0 if r.strip() == prompt.label else 0.0 for r in responses]""",
        ),
        HookPoint(
            name="batch_reward",
            config_key="reward.fn (reward.scope=batch)",
            protocol=BatchRewardFn,
            asyncness="either",
            when="In the reward step, once per rollout batch (e.g. a batched reward model); once per eval set.",
            example="""\
def reward(prompts, responses):
    return [float(len(r) < 10) for r in responses]""",
        ),
        HookPoint(
            name="rollout_data_postprocess",
            config_key="hooks.rollout_data_postprocess",
            protocol=RolloutDataPostprocessFn,
            asyncness="sync",
            when=(
                "After rewards and advantages, before training, once per rollout. config is the run's "
                "HooksConfig (your parameters are in config.args); rollout_data is the RolloutBatch of rollout "
                "rollout_id with rewards, engine logprobs and advantages filled in."
            ),
            example="""\
def postprocess(config, rollout_id, rollout_data):
    for s in rollout_data.samples:
        if s.finish_reason == "length":
            s.advantage = 0.0""",
        ),
        HookPoint(
            name="advantage",
            config_key="hooks.advantage",
            protocol=AdvantageFn,
            asyncness="sync",
            when=(
                "In the advantages step, once per rollout, with the whole batch's rewards [G, N] (one row per group, "
                "in batch order; every group of a batch has the same size N, see heron.algo.assign), so batch "
                "statistics are possible; replaces algo.advantage. With algo.kl_in_reward the rewards already have "
                "kl_coef * KL subtracted."
            ),
            example="""\
def advantage(rewards):
    return rewards - rewards.mean(dim=-1, keepdim=True)""",
        ),
        HookPoint(
            name="policy_loss",
            config_key="hooks.policy_loss",
            protocol=PolicyLossFn,
            asyncness="sync",
            when=(
                "In the train step, once per micro-batch, instead of algo.loss. Compute every term as "
                "sum(loss_mask * per_token) / normalizer: loss_mask is 0/1 under algo.loss_agg=token-mean and "
                "normalizer the loss-token count of the whole mini-batch; other aggregations and algo.off_policy "
                "put per-token weights into loss_mask and their normaliser into normalizer (see "
                "heron.algo.loss_agg). old_logprobs is pi_old, no gradient (one step on-policy: the same "
                "forward's logprobs, detached; see heron.trainer.old_logprobs). logprobs [B, L-1] hold values only "
                "where a position predicts an answer token; elsewhere (loss_mask is 0 there) they are 0 when the "
                "output head ran at the answer positions alone (heron.trainer.lm_head_chunks) or the prompt was "
                "shared (heron.trainer.shared_prompts). Return a PolicyLossOutput."
            ),
            example="""\
def policy_loss(logprobs, old_logprobs, advantages, loss_mask, *, clip_low, clip_high, normalizer):
    out = ppo_clip_loss(logprobs, old_logprobs, advantages, loss_mask,
                        clip_low=clip_low, clip_high=clip_high, normalizer=normalizer)
    return out""",
        ),
        HookPoint(
            name="data_source",
            config_key="hooks.data_source",
            protocol=DataSource,
            asyncness="sync",
            kind="class",
            when=(
                "Built once at start-up as cls(config, seed) with the run's DataConfig and run.seed; the generate "
                "step calls get_samples(rollout.batch_size) once per rollout; checkpoints call state_dict() and "
                "load_state_dict()."
            ),
            example="""\
class Source:
    def __init__(self, config, seed): self.next_id = 0
    def get_samples(self, num): ...
    def add_samples(self, prompts): ...
    def state_dict(self): return {"next_id": self.next_id}
    def load_state_dict(self, state): self.next_id = state["next_id"]""",
        ),
    ]
}

DATA_SOURCE_METHODS = ("get_samples", "add_samples", "state_dict", "load_state_dict")
