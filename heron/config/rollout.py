from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc
from heron.config.dynamic_sampling import DynamicSamplingConfig


@dataclass(frozen=True)
class RolloutConfig:
    """How many rollouts a run makes and how the engine samples them."""

    num_rollouts: int = doc("Number of rollout steps (generate -> train -> push) in the run.", 10)
    batch_size: int = doc("Prompts per rollout.", 8)
    samples_per_prompt: int = doc("Answers sampled per prompt (the GRPO group size).", 4)
    max_new_tokens: int = doc("Maximum generated tokens per answer.", 16)
    temperature: float = doc("Sampling temperature (the trainer uses it for logprobs too).", 1.0)
    top_p: float = doc("Nucleus sampling mass in (0, 1].", 1.0)
    stop: list[str] = doc("Extra stop strings, each a single token; EOS always stops.", factory=list)
    max_batch_size: int = doc("Most sequences the engine decodes at once.", 64)
    dynamic_sampling: DynamicSamplingConfig = doc("DAPO dynamic sampling: keep only informative groups.", factory=DynamicSamplingConfig)

    def __post_init__(self):
        check(self.num_rollouts >= 0, f"rollout.num_rollouts must be >= 0, got {self.num_rollouts}")
        check(self.batch_size >= 1, f"rollout.batch_size must be >= 1, got {self.batch_size}")
        check(self.samples_per_prompt >= 1, f"rollout.samples_per_prompt must be >= 1, got {self.samples_per_prompt}")
        check(self.max_new_tokens >= 1, f"rollout.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check(self.temperature > 0, f"rollout.temperature must be > 0, got {self.temperature}")
        check(0 < self.top_p <= 1, f"rollout.top_p must be in (0, 1], got {self.top_p}")
        check(self.max_batch_size >= 1, f"rollout.max_batch_size must be >= 1, got {self.max_batch_size}")

    @property
    def num_samples(self) -> int:
        return self.batch_size * self.samples_per_prompt
