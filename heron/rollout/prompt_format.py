"""Turns a ``Prompt`` into token ids and token ids back into response text."""

from __future__ import annotations

from heron.records import Prompt


class PromptFormatter:
    """Plain-text prompts (the text is tokenized as is); responses are decoded without
    special tokens, so a trailing EOS is not part of the text a reward sees."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        return self.tokenizer(prompt.text, add_special_tokens=False)["input_ids"]

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def stop_token_ids(self, stop: list[str] | tuple[str, ...] = ()) -> tuple[int, ...]:
        ids = [self.tokenizer.eos_token_id]
        for text in stop:
            token_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(token_ids) != 1:
                raise ValueError(f"stop string {text!r} is {len(token_ids)} tokens; rollout.stop entries must be single tokens")
            ids.append(token_ids[0])
        return tuple(dict.fromkeys(ids))
