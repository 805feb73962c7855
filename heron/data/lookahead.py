"""``LookaheadSampler``: lets the async generator take the *next* rollout's prompts early
while the run still takes them in order.

``reserve(n)`` draws prompts ahead and queues them; the run's next ``take(n)`` returns the
queued prompts instead of drawing new ones, so the prompt stream is exactly the sync one.
``state_dict`` is the cursor before the oldest reservation: a resume regenerates the
in-flight rollout instead of skipping its prompts.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from heron.data.sampler import EpochSampler

T = TypeVar("T")


class LookaheadSampler(Generic[T]):
    def __init__(self, inner: EpochSampler[T]):
        self.inner = inner
        self._reserved: deque[list[T]] = deque()
        self._state_before_reserved: dict[str, int] | None = None

    def reserve(self, n: int) -> list[T]:
        if not self._reserved:
            self._state_before_reserved = self.inner.state_dict()
        items = self.inner.take(n)
        self._reserved.append(items)
        return items

    def take(self, n: int) -> list[T]:
        if not self._reserved:
            return self.inner.take(n)
        items = self._reserved.popleft()
        if len(items) != n:
            raise ValueError(f"reserved {len(items)} prompts but the run takes {n}")
        if not self._reserved:
            self._state_before_reserved = None
        return items

    def state_dict(self) -> dict[str, int]:
        return dict(self._state_before_reserved) if self._reserved else self.inner.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._reserved.clear()
        self._state_before_reserved = None
        self.inner.load_state_dict(state)
