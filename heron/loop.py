"""The RL loop. One screen: every step is a named call into the run's components.

    generate -> reward -> advantages -> postprocess -> train -> push weights -> eval -> log -> checkpoint

Variants (colocated or not, local or Ray, sync or async) live inside the components, never here.
"""

from __future__ import annotations

from heron.config.root import HeronConfig
from heron.rl_run import RLRun


def train(cfg: HeronConfig) -> list[dict]:
    """Runs ``rollout.num_rollouts`` rollout steps; returns the per-rollout metric records."""
    records = []
    with RLRun(cfg) as run:
        run.evaluate(rollout_id=-1)
        for rollout_id in run.rollout_ids():
            batch = run.generate(rollout_id)
            batch = run.reward(batch)
            batch = run.advantages(batch)
            batch = run.postprocess(batch)
            train_metrics = run.train(batch)
            run.push_weights()
            eval_metrics = run.evaluate(rollout_id)
            records.append(run.log(batch, train_metrics, eval_metrics))
            run.checkpoint(rollout_id)
    return records
