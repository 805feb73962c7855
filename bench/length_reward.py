"""The reward of bench/vs_trl.py and bench/throughput.py: a completion's length in characters / 100.

Why not exact match: a model with random weights never answers right, so every reward is 0, every
advantage is 0, and heron leaves those rows out of its train step (``train.skip_zero_advantage``,
heron.trainer.zero_advantage) while TRL trains them all: the two sides would do different work.
Lengths differ between the samples of a group (the toy tokenizer's tokens decode to one to several
characters), so groups have distinct rewards, advantages are non-zero, and both trainers run the
full forward and backward on every row. This file imports nothing, so TRL's venv can load it too.
"""


def completion_length(prompt, response: str) -> float:
    """heron's reward hook (``reward.fn=bench/length_reward.py:completion_length``)."""
    return len(response) / 100.0


def completion_lengths(completions, **_) -> list[float]:
    """TRL's reward function: the same value per completion."""
    return [len(c) / 100.0 for c in completions]
