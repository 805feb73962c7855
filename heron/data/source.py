"""The built-in data source: a dataset walked in seeded epochs, plus a buffer of prompts given
back with ``add_samples`` (handed out again first). Implements the ``DataSource`` hook point
(``heron.plugins.hooks``); a user class with the same five members replaces it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from heron.config.data import DataConfig
from heron.data.dataset import PromptDataset, load_dataset
from heron.data.sampler import EpochSampler
from heron.records import Prompt


class PromptDataSource:
    """``dataset``: the prompts already loaded and checked (the run's pre-flight hands over the
    dataset whose prompt lengths it checked against the model, see heron.preflight); without
    it, ``config.path`` is read here, without length checks."""

    def __init__(self, config: DataConfig, seed: int, dataset: PromptDataset | None = None):
        self.dataset = dataset if dataset is not None else load_dataset(config.path, config)
        self.sampler: EpochSampler[Prompt] = EpochSampler(self.dataset.prompts, seed=seed, shuffle=config.shuffle)
        self.buffer: list[Prompt] = []

    def get_samples(self, num: int) -> list[Prompt]:
        """Buffered prompts first (oldest first), then the next ones of the epoch walk."""
        taken, self.buffer = self.buffer[:num], self.buffer[num:]
        return taken + self.sampler.take(num - len(taken))

    def add_samples(self, prompts: list[Prompt]) -> None:
        self.buffer.extend(prompts)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict(), "buffer": [asdict(p) for p in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.buffer = [Prompt(**p) for p in state["buffer"]]
