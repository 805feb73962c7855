"""The generate stage: prompts -> a ``RolloutBatch`` of ``samples_per_prompt`` answers each.

Each sample is drawn with its own seed derived from (run seed, rollout_id, prompt_id,
sample_index): sampling randomness never depends on batching, and resume is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from heron.config.rollout import RolloutConfig
from heron.records import GenerationRequest, Group, Prompt, RolloutBatch, Sample, SamplingParams
from heron.rollout.engine import RolloutEngine
from heron.rollout.prompt_format import PromptFormatter
from heron.seeding import derive_seed

if TYPE_CHECKING:
    from heron.rollout.custom_generate import CustomGenerate


class RolloutGenerator:
    def __init__(
        self, engine: RolloutEngine, formatter: PromptFormatter, cfg: RolloutConfig, seed: int,
        custom: CustomGenerate | None = None, hook_args: dict[str, Any] | None = None,
    ):
        self.engine = engine
        self.formatter = formatter
        self.cfg = cfg
        self.seed = seed
        self.stop_token_ids = formatter.stop_token_ids(cfg.stop)
        self.custom = custom  # hooks.generate, replaces the single-turn sampling below
        self.hook_args = hook_args or {}

    def params(self, seed: int, greedy: bool = False, max_new_tokens: int | None = None) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=max_new_tokens or self.cfg.max_new_tokens,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            stop_token_ids=self.stop_token_ids,
            seed=seed,
            greedy=greedy,
        )

    def generate(self, rollout_id: int, prompts: list[Prompt], seed: int | None = None) -> RolloutBatch:
        """``seed`` replaces run.seed in every sample's seed derivation: dynamic sampling's
        extra rounds pass one per round, so their draws differ from round 0's."""
        seed = self.seed if seed is None else seed
        if self.custom is not None:
            from heron.rollout.generate_context import GenerateContext

            ctx = GenerateContext(rollout_id, self.engine, self.formatter, self.cfg, seed, self.stop_token_ids, self.hook_args)
            return RolloutBatch(rollout_id, self.engine.policy_version, self.custom.groups(ctx, prompts))
        n = self.cfg.samples_per_prompt
        requests = [
            GenerationRequest(
                prompt_tokens=self.formatter.encode(p),
                params=self.params(derive_seed(seed, rollout_id, p.prompt_id, i)),
            )
            for p in prompts
            for i in range(n)
        ]
        generations = self.engine.generate(requests)
        groups = []
        for k, prompt in enumerate(prompts):
            samples = []
            for i in range(n):
                req, gen = requests[k * n + i], generations[k * n + i]
                samples.append(
                    Sample(
                        rollout_id=rollout_id,
                        prompt_id=prompt.prompt_id,
                        sample_index=i,
                        policy_version=gen.policy_version,
                        prompt_tokens=list(req.prompt_tokens),
                        response_tokens=list(gen.tokens),
                        response_logprobs=list(gen.logprobs),
                        loss_mask=[1] * len(gen.tokens),
                        response_text=self.formatter.decode(gen.tokens),
                        finish_reason=gen.finish_reason,
                    )
                )
            groups.append(Group(prompt=prompt, samples=samples))
        return RolloutBatch(rollout_id=rollout_id, policy_version=self.engine.policy_version, groups=groups)

    def in_flight(self) -> RolloutBatch | None:
        """The rollout generated ahead of the loop, for a checkpoint to keep: none here (a
        rollout is generated when the loop asks for it; ``AsyncRolloutGenerator`` has one)."""
        return None

    def resume_in_flight(self, batch: RolloutBatch) -> bool:
        """Takes a checkpoint's in-flight rollout as the next one to return; False: this
        generator does not (a sync run generates that rollout again, with the restored policy)."""
        return False

    def close(self) -> None:
        """Nothing runs in the background here (``AsyncRolloutGenerator`` stops its thread)."""
