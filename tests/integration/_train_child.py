"""Child process of the training crash test: a real RL run (``heron.loop.train``) with the
test's length reward registered. Usage: _train_child.py key.sub=value ..."""

import sys

from heron.config.root import load_config
from heron.loop import train
from heron.reward.builtin import BUILTIN_REWARDS


def length_reward(prompt, response: str) -> float:
    return len(response.strip()) / 8.0


if __name__ == "__main__":
    BUILTIN_REWARDS["test_length"] = length_reward
    train(load_config(None, sys.argv[1:]))
