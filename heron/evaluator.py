"""Held-out evaluation: one greedy answer per prompt (``eval/accuracy``) and, with
``eval.samples`` = n, n sampled answers per prompt (``eval/pass@k``, ``eval/mean@n``; see
heron.pass_at_k), all scored by the run's reward scorer (so reward hooks, scopes and failure
isolation apply to eval as to training).

Sampled answers are seeded by (run.seed, set name, prompt id, sample index), not by the rollout:
every eval of a run draws the same random numbers, so pass@k moves only with the policy, and
``heron eval`` of a checkpoint reproduces what the run logged for it."""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.eval import EvalConfig
from heron.pass_at_k import sampled_metrics
from heron.records import GenerationRequest, Prompt, SamplingParams
from heron.reward.scorer import RewardScorer
from heron.rollout.engine import RolloutEngine
from heron.rollout.prompt_format import PromptFormatter
from heron.seeding import derive_seed


@dataclass(frozen=True)
class EvalSampling:
    """The sampled answers of ``eval.samples`` (``samples`` = 0: greedy only)."""

    samples: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    pass_threshold: float = 1.0  # a sample is correct for pass@k when its reward >= this
    seed: int = 0  # run.seed


class Evaluator:
    """One eval set; metrics are ``eval/<metric>`` for the unnamed set (eval.path) and
    ``eval/<name>/<metric>`` for a named one (eval.sets.<name>)."""

    def __init__(self, prompts: list[Prompt], formatter: PromptFormatter, scorer: RewardScorer, max_new_tokens: int,
                 name: str = "", sampling: EvalSampling = EvalSampling()):
        self.prompts = prompts
        self.formatter = formatter
        self.scorer = scorer
        self.name = name
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.params = SamplingParams(
            max_new_tokens=max_new_tokens, greedy=True, stop_token_ids=formatter.stop_token_ids()
        )

    def _sampled_params(self, prompt: Prompt, index: int) -> SamplingParams:
        s = self.sampling
        return SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
            stop_token_ids=self.params.stop_token_ids, seed=derive_seed(s.seed, "eval", self.name, prompt.prompt_id, index),
        )

    def evaluate(self, engine: RolloutEngine) -> dict[str, float]:
        n = self.sampling.samples
        prompts = list(self.prompts) + [p for p in self.prompts for _ in range(n)]  # greedy first, then n per prompt
        params = [self.params] * len(self.prompts) + [self._sampled_params(p, i) for p in self.prompts for i in range(n)]
        generations = engine.generate([GenerationRequest(self.formatter.encode(p), q) for p, q in zip(prompts, params)])
        responses = [self.formatter.decode(g.tokens) for g in generations]
        base = f"eval{'/' + self.name if self.name else ''}/p"
        ids = [f"{base}{p.prompt_id}" for p in self.prompts] + [
            f"{base}{p.prompt_id}/s{i}" for p in self.prompts for i in range(n)
        ]
        scores = self.scorer.score_responses(prompts, responses, ids)  # leaves reward/num_errors alone
        greedy = scores.rewards[: len(self.prompts)]
        prefix = f"eval/{self.name}/" if self.name else "eval/"
        metrics = {
            f"{prefix}accuracy": sum(greedy) / len(greedy),
            f"{prefix}num_prompts": float(len(greedy)),
            f"{prefix}reward_errors": float(scores.num_errors),
        }
        if n:
            sampled = scores.rewards[len(self.prompts):]  # [num_prompts * n], prompt-major
            rows = [sampled[i * n:(i + 1) * n] for i in range(len(self.prompts))]
            metrics.update(sampled_metrics(rows, self.sampling.pass_threshold, prefix))
        return metrics


class EvalSuite:
    """All eval sets of a run, evaluated one after another into one metrics dict."""

    def __init__(self, evaluators: list[Evaluator]):
        self.evaluators = evaluators

    def evaluate(self, engine: RolloutEngine) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for evaluator in self.evaluators:
            metrics.update(evaluator.evaluate(engine))
        return metrics


def build_eval_suite(cfg: EvalConfig, seed: int, eval_sets: dict[str, list[Prompt]], formatter: PromptFormatter,
                     scorer: RewardScorer) -> EvalSuite | None:
    """The run's eval sets (name -> prompts, "" = eval.path) as one suite; None without any."""
    sampling = EvalSampling(cfg.samples, cfg.temperature, cfg.top_p, cfg.pass_threshold, seed)
    evaluators = [
        Evaluator(prompts[: cfg.max_prompts or None], formatter, scorer, cfg.max_new_tokens, name=name, sampling=sampling)
        for name, prompts in eval_sets.items()
    ]
    return EvalSuite(evaluators) if evaluators else None
