"""Turns a ``Prompt`` into token ids and token ids back into response text."""

from __future__ import annotations

from heron.records import Prompt


class PromptFormatter:
    """Plain-text prompts (the text is tokenized as is), or, with ``apply_chat_template``, the
    tokenizer's chat template over the prompt's messages (default: one user turn holding the
    text) plus the generation prompt. Responses are decoded without special tokens, so a
    trailing EOS is not part of the text a reward sees."""

    def __init__(self, tokenizer, apply_chat_template: bool = False):
        self.tokenizer = tokenizer
        self.apply_chat_template = apply_chat_template
        if apply_chat_template and not getattr(tokenizer, "chat_template", None):
            from heron.config.base import ConfigError

            raise ConfigError("data.apply_chat_template=true but the tokenizer at model.path has no chat_template")

    def text(self, prompt: Prompt) -> str:
        """The string ``encode`` tokenizes: the prompt text, or its chat template rendering."""
        if not self.apply_chat_template:
            return prompt.text
        messages = prompt.messages or [{"role": "user", "content": prompt.text}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of many ``text(prompt)`` strings in one batched tokenizer call."""
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def encode(self, prompt: Prompt) -> list[int]:
        return self.tokenizer(self.text(prompt), add_special_tokens=False)["input_ids"]

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def stop_token_ids(self, stop: list[str] | tuple[str, ...] = ()) -> tuple[int, ...]:
        ids = [self.tokenizer.eos_token_id]
        for text in stop:
            token_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(token_ids) != 1:
                from heron.config.base import ConfigError

                raise ConfigError(f"rollout.stop entry {text!r} is {len(token_ids)} tokens; rollout.stop entries must be single tokens")
            ids.append(token_ids[0])
        return tuple(dict.fromkeys(ids))
