from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class EvalConfig:
    """Greedy accuracy on held-out splits: ``eval.path`` (logged as eval/accuracy) and any
    named ``eval.sets`` (logged as eval/<name>/accuracy); same keys and format rules as data."""

    path: str = doc("Held-out prompts (same keys as data); empty disables this set.", "")
    sets: dict[str, str] = doc("More eval sets, name -> path (eval.sets.<name>=<path>), each logged under its name.", factory=dict)
    interval: int = doc("Evaluate every N rollouts (and before the first and after the last); 0 disables.", 5)
    max_prompts: int = doc("Evaluate at most this many prompts per set (0 = all).", 0)
    max_new_tokens: int = doc("Maximum generated tokens per eval answer.", 16)

    def __post_init__(self):
        check(self.interval >= 0, f"eval.interval must be >= 0, got {self.interval}")
        check(self.max_prompts >= 0, f"eval.max_prompts must be >= 0, got {self.max_prompts}")
        for name, path in self.sets.items():
            check(isinstance(path, str) and path != "", f"eval.sets.{name} must be a dataset path, got {path!r}")
            check(str(name).replace("_", "").replace("-", "").isalnum(), f"eval.sets name '{name}' must be letters, digits, - or _")

    @property
    def named_paths(self) -> dict[str, str]:
        """Every eval set, name -> path; the eval.path set has the empty name."""
        return {**({"": self.path} if self.path else {}), **self.sets}

    @property
    def enabled(self) -> bool:
        return bool(self.named_paths) and self.interval > 0
