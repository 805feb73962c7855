"""A seeded, resumable walk over a dataset, epoch after epoch.

The order of epoch ``e`` is a permutation drawn from ``Random(seed * 1_000_003 + e)``, so
the whole stream is a pure function of (seed, epoch, cursor): saving those three numbers is
enough to resume at exactly the next prompt.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


@dataclass
class SamplerState:
    epoch: int = 0
    cursor: int = 0  # index of the next item within the epoch's order


class EpochSampler(Generic[T]):
    def __init__(self, items: Sequence[T], seed: int, shuffle: bool = True):
        if not items:
            raise ValueError("cannot sample from an empty dataset")
        self._items = items
        self._seed = seed
        self._shuffle = shuffle
        self.state = SamplerState()
        self._order = self._order_of(0)

    def _order_of(self, epoch: int) -> list[int]:
        order = list(range(len(self._items)))
        if self._shuffle:
            random.Random(self._seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[T]:
        """The next ``n`` items, wrapping into the next (reshuffled) epoch as needed."""
        out = []
        for _ in range(n):
            if self.state.cursor == len(self._order):
                self.state = SamplerState(epoch=self.state.epoch + 1, cursor=0)
                self._order = self._order_of(self.state.epoch)
            out.append(self._items[self._order[self.state.cursor]])
            self.state.cursor += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return asdict(self.state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.state = SamplerState(**state)
        self._order = self._order_of(self.state.epoch)
