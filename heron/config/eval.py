from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class EvalConfig:
    """Greedy accuracy on a held-out split."""

    path: str = doc("Held-out prompts (JSONL, same keys as data); empty disables eval.", "")
    interval: int = doc("Evaluate every N rollouts (and before the first and after the last); 0 disables.", 5)
    max_prompts: int = doc("Evaluate at most this many prompts (0 = all).", 0)
    max_new_tokens: int = doc("Maximum generated tokens per eval answer.", 16)

    def __post_init__(self):
        check(self.interval >= 0, f"eval.interval must be >= 0, got {self.interval}")
        check(self.max_prompts >= 0, f"eval.max_prompts must be >= 0, got {self.max_prompts}")

    @property
    def enabled(self) -> bool:
        return bool(self.path) and self.interval > 0
