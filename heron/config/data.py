from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class DataConfig:
    """Prompt data for RL: a JSONL file with one object per line."""

    path: str = doc("Training prompts (JSONL).", "")
    prompt_key: str = doc("Row key holding the prompt text.", "prompt")
    label_key: str = doc("Row key holding the reference answer for the reward.", "label")
    shuffle: bool = doc("Reshuffle the prompts every epoch (seeded by run.seed and the epoch).", True)

    def __post_init__(self):
        check(self.path != "", "data.path is required: set data.path=<prompts.jsonl>")
