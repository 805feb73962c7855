"""Batches the engine calls of concurrent async generate hooks.

Each async hook task of a rollout calls ``ctx.agenerate`` for its next turn; the batcher holds
the request until every live task is waiting on the engine (or has finished), then decodes all
held requests as one engine batch. So a multi-turn hook written with ``async def`` gets one
engine call per turn for the whole rollout, not one per sample. Flushing only when every task
waits (never on a timer) keeps the batches a function of the hooks' logic, not of timing --
unless the hooks themselves await outside I/O (a tool server); a request's output never
depends on its batch anyway (engine contract), up to float round-off.

Single event loop, single thread: no locks needed.
"""

from __future__ import annotations

import asyncio

from heron.records import Generation, GenerationRequest
from heron.rollout.engine import RolloutEngine


class TurnBatcher:
    def __init__(self, engine: RolloutEngine, num_tasks: int):
        self.engine = engine
        self.num_live = num_tasks
        self.pending: list[tuple[GenerationRequest, asyncio.Future]] = []
        self.batch_sizes: list[int] = []  # one entry per engine call, for metrics and tests

    async def generate(self, request: GenerationRequest) -> Generation:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self._flush_if_all_wait()
        return await future

    def task_done(self) -> None:
        self.num_live -= 1
        self._flush_if_all_wait()

    def _flush_if_all_wait(self) -> None:
        if not self.pending or len(self.pending) < self.num_live:
            return
        batch, self.pending = self.pending, []
        self.batch_sizes.append(len(batch))
        try:
            generations = self.engine.generate([request for request, _ in batch])
        except Exception as e:  # noqa: BLE001 -- handed to every waiting hook
            for _, future in batch:
                future.set_exception(e)
            return
        for (_, future), generation in zip(batch, generations):
            future.set_result(generation)
