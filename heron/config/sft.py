from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm start (``heron sft``): teaches the output format before RL."""

    path: str = doc("Prompt/label JSONL used as supervised examples (defaults to data.path).", "")
    num_steps: int = doc("Optimizer steps of supervised training.", 200)
    batch_size: int = doc("Examples per optimizer step.", 32)
    lr: float = doc("Learning rate (AdamW, linear warm-up over the first 5% of steps).", 1e-3)
    output: str = doc("Where the warm-started HF model folder is written (default <run.dir>/sft-model).", "")

    def __post_init__(self):
        check(self.num_steps >= 1, f"sft.num_steps must be >= 1, got {self.num_steps}")
        check(self.batch_size >= 1, f"sft.batch_size must be >= 1, got {self.batch_size}")
        check(self.lr > 0, f"sft.lr must be > 0, got {self.lr}")
