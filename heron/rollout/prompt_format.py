"""Turns a ``Prompt`` into token ids and token ids back into response text."""

from __future__ import annotations

from heron.config.base import ConfigError
from heron.records import Prompt


class PromptFormatter:
    """Plain-text prompts (the text is tokenized as is), or, with ``apply_chat_template``, the
    tokenizer's chat template over the prompt's messages (default: one user turn holding the
    text) plus the generation prompt. ``system_prompt`` (``data.system_prompt``) is a system
    turn put first, unless the row's messages already start with one. Training rollouts, eval
    and SFT all encode through this one object, so they see the same formatting. Responses are
    decoded without special tokens, so a trailing EOS is not part of the text a reward sees."""

    def __init__(self, tokenizer, apply_chat_template: bool = False, system_prompt: str = ""):
        self.tokenizer = tokenizer
        self.apply_chat_template = apply_chat_template
        self.system_prompt = system_prompt
        if apply_chat_template and not getattr(tokenizer, "chat_template", None):
            raise ConfigError("data.apply_chat_template=true but the tokenizer at model.path has no chat_template")
        if system_prompt:
            self._check_system_turn()

    def messages(self, prompt: Prompt) -> list[dict[str, str]]:
        """The chat turns the template renders: the row's messages (or one user turn), with the
        configured system turn first when the row has none of its own."""
        messages = prompt.messages or [{"role": "user", "content": prompt.text}]
        if self.system_prompt and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        return messages

    def text(self, prompt: Prompt) -> str:
        """The string ``encode`` tokenizes: the prompt text, or its chat template rendering."""
        if not self.apply_chat_template:
            return prompt.text
        return self.tokenizer.apply_chat_template(self.messages(prompt), tokenize=False, add_generation_prompt=True)

    def _check_system_turn(self) -> None:
        """Some chat templates refuse a system turn (they raise) or drop it silently; either
        would train without the configured system prompt, so both fail at start-up."""
        probe = Prompt(prompt_id=-1, text="1+1=", label="")
        try:
            rendered = self.text(probe)
        except Exception as e:  # noqa: BLE001 -- jinja2 raises TemplateError, templates raise anything
            raise ConfigError(
                f"data.system_prompt is set but the chat template at model.path refuses a system turn "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); put the instruction in the prompts instead"
            ) from None
        if self.system_prompt.strip() not in rendered:
            raise ConfigError(
                "data.system_prompt is set but the chat template at model.path drops the system turn "
                "(its rendering does not contain it); put the instruction in the prompts instead"
            )

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
                raise ConfigError(f"rollout.stop entry {text!r} is {len(token_ids)} tokens; rollout.stop entries must be single tokens")
            ids.append(token_ids[0])
        return tuple(dict.fromkeys(ids))
