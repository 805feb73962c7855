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
    system_prompt: str = doc(
        "A system turn put before every prompt (training and eval) through the chat template; needs "
        "apply_chat_template. A row whose messages start with their own system turn keeps it. Empty = none.", ""
    )
    on_bad_row: Literal["error", "skip"] = doc(
        "A malformed row (bad JSON, missing key, wrong type, empty prompt): error stops at start-up (file:line); "
        "skip drops it, logs it and counts it (metric data/bad_rows).", "error"
    )
    max_prompt_tokens: int = doc(
        "Longest prompt in tokens, as encoded (chat template and system prompt included); 0 = the model's "
        "max_position_embeddings minus rollout.max_new_tokens. max_prompt_tokens + max_new_tokens must fit the model.", 0
    )
    on_long_prompt: Literal["error", "drop"] = doc(
        "A prompt over max_prompt_tokens (or past the model's context): error stops at start-up naming the row; "
        "drop leaves it out, counted (metric data/dropped_long_prompts) and named once in the log.", "error"
    )
    shuffle: bool = doc("Reshuffle the prompts every epoch (seeded by run.seed and the epoch).", True)

    def __post_init__(self):
        check(self.prompt_key != "", "data.prompt_key must not be empty")
        check(self.max_prompt_tokens >= 0, f"data.max_prompt_tokens must be >= 0 (0 = the model's context), got {self.max_prompt_tokens}")
        check(
            self.system_prompt == "" or self.apply_chat_template,
            "data.system_prompt is a chat turn: set data.apply_chat_template=true too (the tokenizer's template renders it)",
        )
