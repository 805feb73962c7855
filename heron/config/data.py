from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class DataConfig:
    """Prompt data for RL: JSONL, Parquet, or a local HF ``datasets`` folder (save_to_disk)."""

    path: str = doc("Training prompts: a .jsonl or .parquet file, or an HF datasets folder.", "")
    format: Literal["auto", "jsonl", "parquet", "hf"] = doc("File format; auto picks by extension (folder = hf).", "auto")
    split: str = doc("Split to read when an HF folder holds a DatasetDict (e.g. train).", "train")
    prompt_key: str = doc("Row key holding the prompt: a string, or a list of {role, content} chat messages.", "prompt")
    label_key: str = doc("Row key holding the reference answer for the reward; empty = no label.", "label")
    metadata_keys: list[str] = doc("Row keys passed through as Prompt.metadata; empty = every other key.", factory=list)
    apply_chat_template: bool = doc("Encode prompts with the tokenizer's chat template (as one user turn).", False)
    on_bad_row: Literal["error", "skip"] = doc("A malformed row: error stops at start-up (file:line); skip counts and logs it.", "error")
    shuffle: bool = doc("Reshuffle the prompts every epoch (seeded by run.seed and the epoch).", True)

    def __post_init__(self):
        check(self.prompt_key != "", "data.prompt_key must not be empty")
