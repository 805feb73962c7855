"""Greedy accuracy on a held-out split: one answer per prompt, scored by the run's reward."""

from __future__ import annotations

from heron.records import GenerationRequest, Prompt, SamplingParams
from heron.reward.scorer import RewardFn
from heron.rollout.engine import RolloutEngine
from heron.rollout.prompt_format import PromptFormatter


class Evaluator:
    def __init__(self, prompts: list[Prompt], formatter: PromptFormatter, reward_fn: RewardFn, max_new_tokens: int):
        self.prompts = prompts
        self.formatter = formatter
        self.reward_fn = reward_fn
        self.params = SamplingParams(
            max_new_tokens=max_new_tokens, greedy=True, stop_token_ids=formatter.stop_token_ids()
        )

    def evaluate(self, engine: RolloutEngine) -> dict[str, float]:
        requests = [GenerationRequest(self.formatter.encode(p), self.params) for p in self.prompts]
        generations = engine.generate(requests)
        scores = [
            self.reward_fn(p, self.formatter.decode(g.tokens)) for p, g in zip(self.prompts, generations)
        ]
        return {"eval/accuracy": sum(scores) / len(scores), "eval/num_prompts": float(len(scores))}
