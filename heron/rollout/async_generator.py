"""One-step off-policy generation: rollout k+1 is generated while the trainer trains on k.

Lifecycle (disaggregated Ray engines only). ``generate(k)``
  1. returns rollout k: the result of the generation started during step k-1, or, for the
     first rollout, one generated now;
  2. reserves rollout k+1's prompts (``LookaheadSampler``) and starts generating it in a
     background thread, which then blocks in the engine actor while the run trains on k.
The run's weight push after ``train(k)`` queues behind that generation on the engine actor
(an actor runs its calls in order), so rollout k+1 comes from weights v_k while the trainer
updates on rollout k: every sample is at most one version stale. Who unblocks whom: the
trainer never waits for the engine during ``train``; the push waits for generation k+1.

Staleness of a sample = rollout_id - policy_version (the trainer's version when it trains
rollout k is k); it is checked against ``loop.max_staleness`` for every sample and written
per sample to ``<run.dir>/staleness.jsonl``.

Resume: the checkpoint after rollout k holds rollout k+1 as generated (``in_flight``; by then
the push of v_{k+1} has waited for it, so nothing waits longer), and a run resumed from it
trains those samples (``resume_in_flight``): the same samples from the same weights v_k,
one version stale, as the uninterrupted run. Generating k+1 again would sample from the
restored v_{k+1} instead. The data source's state in that checkpoint is its cursor before
k+1's prompts (``LookaheadSampler``), so the resumed run draws them again and the generator
checks they are the saved rollout's; if they are not (a data source that does not restore
exactly), it generates the rollout again and says so. A checkpoint whose in-flight generation
failed is saved without it; the error is raised by the next ``generate``, as without a save.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from heron.data.lookahead import LookaheadSampler
from heron.records import Prompt, RolloutBatch
from heron.rollout.generator import RolloutGenerator

log = logging.getLogger("heron.rollout")


class StalenessError(RuntimeError):
    """A sample lags the trainer by more than ``loop.max_staleness`` policy versions."""


class AsyncRolloutGenerator:
    def __init__(self, inner: RolloutGenerator, sampler: LookaheadSampler, *, batch_size: int,
                 num_rollouts: int, max_staleness: int, log_path: Path):
        self.inner = inner
        self.engine = inner.engine
        self.sampler = sampler
        self.batch_size = batch_size
        self.num_rollouts = num_rollouts
        self.max_staleness = max_staleness
        self.log_path = log_path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="heron-async-generate")
        self._pending: tuple[int, Future] | None = None

    def generate(self, rollout_id: int, prompts: list[Prompt]) -> RolloutBatch:
        batch = None
        if self._pending is not None and self._pending[0] == rollout_id:
            batch = self._pending[1].result()  # the call inside has its own deadline
            if _prompt_ids(batch) != [p.prompt_id for p in prompts]:
                log.warning("rollout %d: the data source gives prompts %s, not those of the rollout generated ahead "
                            "(%s); generating it again", rollout_id, [p.prompt_id for p in prompts], _prompt_ids(batch))
                batch = None
        self._pending = None
        if batch is None:
            batch = self.inner.generate(rollout_id, prompts)
        if rollout_id + 1 < self.num_rollouts:
            next_prompts = self.sampler.reserve(self.batch_size)
            self._pending = (rollout_id + 1, self._pool.submit(self.inner.generate, rollout_id + 1, next_prompts))
        self._check_and_log(batch)
        return batch

    def in_flight(self) -> RolloutBatch | None:
        """The rollout generating ahead, once done (module docstring, Resume); None when there is
        none or its generation failed (``generate`` raises that error)."""
        if self._pending is None:
            return None
        try:
            return self._pending[1].result()
        except Exception:
            return None

    def resume_in_flight(self, batch: RolloutBatch) -> bool:
        """A checkpoint's in-flight rollout becomes the one ``generate(batch.rollout_id)`` returns."""
        done: Future = Future()
        done.set_result(batch)
        self._pending = (batch.rollout_id, done)
        return True

    def _check_and_log(self, batch: RolloutBatch) -> None:
        rows = [
            {"rollout_id": batch.rollout_id, "sample_id": s.sample_id, "policy_version": s.policy_version,
             "staleness": batch.rollout_id - s.policy_version}
            for s in batch.samples
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        worst = max(rows, key=lambda r: r["staleness"])
        if worst["staleness"] > self.max_staleness:
            raise StalenessError(
                f"sample {worst['sample_id']} was generated by policy version {worst['policy_version']}, "
                f"{worst['staleness']} versions behind (loop.max_staleness={self.max_staleness})"
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _prompt_ids(batch: RolloutBatch) -> list[int]:
    return [g.prompt.prompt_id for g in batch.groups]
