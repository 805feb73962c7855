"""The RL loop. One screen: every step is a named call into the run's components.

    generate -> reward -> advantages -> postprocess -> train -> push weights -> eval -> log -> checkpoint

Variants (colocated or not, local or Ray, sync or async) live inside the components, never here.
``train(cfg)`` is what ``heron train`` runs; ``run_rollouts(run)`` is the same loop over a run the
caller opened (tests and notebooks that inspect the run afterwards), so nothing re-writes it.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.config.root import HeronConfig
from heron.records import RolloutBatch
from heron.rl_run import RLRun

RolloutObserver = Callable[[RolloutBatch, dict], None]
"""Called after each rollout with its batch (rewards, advantages) and its metrics record."""


def train(cfg: HeronConfig) -> list[dict]:
    """Runs ``rollout.num_rollouts`` rollout steps; returns the per-rollout metric records."""
    with RLRun(cfg) as run:
        return run_rollouts(run)


def run_rollouts(run: RLRun, observer: RolloutObserver | None = None) -> list[dict]:
    """The loop over an open ``RLRun`` (from its first rollout not yet done to the last)."""
    records = []
    run.evaluate(rollout_id=-1)
    for rollout_id in run.rollout_ids():
        with run.profiled(rollout_id):  # torch.profiler, for the rollouts tracking.profile names
            batch = run.generate(rollout_id)
            batch = run.reward(batch)
            batch = run.advantages(batch)
            batch = run.postprocess(batch)
            train_metrics = run.train(batch)
            run.push_weights()
            eval_metrics = run.evaluate(rollout_id)
            records.append(run.log(batch, train_metrics, eval_metrics))
            run.checkpoint(rollout_id)
        if observer is not None:
            observer(batch, records[-1])
    return records
