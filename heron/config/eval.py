from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class EvalConfig:
    """Greedy accuracy on held-out splits: ``eval.path`` (logged as eval/accuracy) and any
    named ``eval.sets`` (logged as eval/<name>/accuracy); same keys and format rules as data.
    With ``eval.samples`` = n > 0, each prompt also gets n sampled answers at ``eval.temperature``,
    logged as eval/pass@k (unbiased estimator, k = 1, 2, 4, ... n) and eval/mean@n (heron.pass_at_k)."""

    path: str = doc("Held-out prompts (same keys as data); empty disables this set.", "")
    sets: dict[str, str] = doc("More eval sets, name -> path (eval.sets.<name>=<path>), each logged under its name.", factory=dict)
    interval: int = doc("Evaluate every N rollouts (and before the first and after the last); 0 disables.", 5)
    max_prompts: int = doc("Evaluate at most this many prompts per set (0 = all).", 0)
    max_new_tokens: int = doc("Maximum generated tokens per eval answer.", 16)
    samples: int = doc("Sampled answers per prompt for pass@k and mean@k, beside the greedy one (0 = greedy only).", 0)
    temperature: float = doc("Sampling temperature of the eval.samples answers.", 1.0)
    top_p: float = doc("Nucleus sampling of the eval.samples answers (1.0 = off).", 1.0)
    pass_threshold: float = doc("A sampled answer counts as correct for pass@k when its reward is >= this.", 1.0)

    def __post_init__(self):
        check(self.interval >= 0, f"eval.interval must be >= 0, got {self.interval}")
        check(self.max_prompts >= 0, f"eval.max_prompts must be >= 0, got {self.max_prompts}")
        check(self.samples >= 0, f"eval.samples must be >= 0 (0 = greedy only), got {self.samples}")
        check(self.temperature > 0, f"eval.temperature must be > 0 (greedy answers are always evaluated), got {self.temperature}")
        check(0 < self.top_p <= 1, f"eval.top_p must be in (0, 1], got {self.top_p}")
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
