"""Built-in rule-based rewards. Signature of a per-sample reward: ``(prompt, response) -> float``."""

from __future__ import annotations

from heron.records import Prompt


def exact_match(prompt: Prompt, response: str) -> float:
    """1.0 when the response, stripped of surrounding whitespace, equals the label; else 0.0."""
    return 1.0 if response.strip() == prompt.label.strip() else 0.0


BUILTIN_REWARDS = {"exact_match": exact_match}
