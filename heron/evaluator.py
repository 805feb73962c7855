"""Greedy accuracy on held-out splits: one answer per prompt, scored by the run's reward
scorer (so reward hooks, scopes and failure isolation apply to eval as to training)."""

from __future__ import annotations

from heron.records import GenerationRequest, Prompt, SamplingParams
from heron.reward.scorer import RewardScorer
from heron.rollout.engine import RolloutEngine
from heron.rollout.prompt_format import PromptFormatter


class Evaluator:
    """One eval set; metrics are ``eval/accuracy`` for the unnamed set (eval.path) and
    ``eval/<name>/accuracy`` for a named one (eval.sets.<name>)."""

    def __init__(self, prompts: list[Prompt], formatter: PromptFormatter, scorer: RewardScorer, max_new_tokens: int, name: str = ""):
        self.prompts = prompts
        self.formatter = formatter
        self.scorer = scorer
        self.name = name
        self.params = SamplingParams(
            max_new_tokens=max_new_tokens, greedy=True, stop_token_ids=formatter.stop_token_ids()
        )

    def evaluate(self, engine: RolloutEngine) -> dict[str, float]:
        requests = [GenerationRequest(self.formatter.encode(p), self.params) for p in self.prompts]
        generations = engine.generate(requests)
        responses = [self.formatter.decode(g.tokens) for g in generations]
        ids = [f"eval{'/' + self.name if self.name else ''}/p{p.prompt_id}" for p in self.prompts]
        scores = self.scorer.score_responses(self.prompts, responses, ids)  # leaves reward/num_errors alone
        prefix = f"eval/{self.name}/" if self.name else "eval/"
        return {
            f"{prefix}accuracy": sum(scores.rewards) / len(scores.rewards),
            f"{prefix}num_prompts": float(len(scores.rewards)),
            f"{prefix}reward_errors": float(scores.num_errors),
        }


class EvalSuite:
    """All eval sets of a run, evaluated one after another into one metrics dict."""

    def __init__(self, evaluators: list[Evaluator]):
        self.evaluators = evaluators

    def evaluate(self, engine: RolloutEngine) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for evaluator in self.evaluators:
            metrics.update(evaluator.evaluate(engine))
        return metrics
