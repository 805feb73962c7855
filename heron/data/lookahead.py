"""``LookaheadSampler``: lets the async generator take the *next* rollout's prompts early
while the run still takes them in order. A ``DataSource`` wrapping a ``DataSource``.

``reserve(n)`` draws prompts ahead and queues them; the run's next ``get_samples(n)`` returns
the queued prompts instead of drawing new ones, so the prompt stream is exactly the sync one.
Prompts given back (``add_samples``) go to the wrapped source: they come after the
reservation already drawn.
``state_dict`` is the cursor before the oldest reservation: a resume draws the in-flight
rollout's prompts again instead of skipping them (and the async generator returns the rollout
the checkpoint saved for them: heron.rollout.async_generator).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LookaheadSampler(Generic[T]):
    def __init__(self, inner: Any):  # a heron.plugins.hooks.DataSource
        self.inner = inner
        self._reserved: deque[list[T]] = deque()
        self._state_before_reserved: dict[str, Any] | None = None

    def reserve(self, n: int) -> list[T]:
        if not self._reserved:
            self._state_before_reserved = self.inner.state_dict()
        items = self.inner.get_samples(n)
        self._reserved.append(items)
        return items

    def get_samples(self, n: int) -> list[T]:
        if not self._reserved:
            return self.inner.get_samples(n)
        items = self._reserved.popleft()
        if len(items) != n:
            raise ValueError(f"reserved {len(items)} prompts but the run takes {n}")
        if not self._reserved:
            self._state_before_reserved = None
        return items

    def add_samples(self, items: list[T]) -> None:
        self.inner.add_samples(items)

    def state_dict(self) -> dict[str, Any]:
        return dict(self._state_before_reserved) if self._reserved else self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._reserved.clear()
        self._state_before_reserved = None
        self.inner.load_state_dict(state)
